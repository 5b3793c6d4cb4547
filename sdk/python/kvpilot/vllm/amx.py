"""AMX tile permission for vLLM's CPU kernels on Intel CPUs that have AMX.

Linux hands a process the AMX tile registers only after it asks
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); the first AMX
instruction of a process that never asked dies with SIGILL. vLLM's CPU
attention picks its ``amx`` kernels for bf16 caches with blocks of a
multiple of 32 tokens (``vllm/v1/attention/backends/cpu_attn.py``) and
never asks: in vLLM 0.32 the only code that asks is oneDNN's
``amx::is_available()`` (in vLLM's ``_C`` library and in PyTorch), reached
when a linear layer goes through oneDNN: at load for weights over 1 MiB
(``onednn_mm``), else on the first batched GEMM of more than four rows
(the sgl-kernel ``brgemm`` path; four rows or fewer take a kernel without
AMX). A process whose first forward computes only a few tokens, because
kvpilot handed it the rest of the prompt, can reach the attention kernel
before any of those: it dies inside ``cpu_attention_with_kv_cache``.

So the connector asks for the permission itself, once per process, when
vLLM runs on its CPU platform and the CPU has AMX tiles.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class AmxProbe:
    """What the permission request needs to know and do; the defaults are
    vLLM's and PyTorch's own, a test passes its own.
    """

    is_cpu_platform: Callable[[], bool]
    has_amx_tiles: Callable[[], bool]
    request_permission: Callable[[], bool]


def _vllm_is_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _torch_has_amx() -> bool:
    import torch

    return bool(torch.cpu._is_amx_tile_supported())


def _torch_init_amx() -> bool:
    # torch.cpu._init_amx wraps at::cpu::init_amx: the arch_prctl request on
    # Linux; True when the kernel granted it (or had already).
    import torch

    return bool(torch.cpu._init_amx())


DEFAULT_PROBE = AmxProbe(_vllm_is_cpu, _torch_has_amx, _torch_init_amx)


def request_amx_permission(log: logging.Logger, probe: AmxProbe = DEFAULT_PROBE) -> bool | None:
    """Asks Linux for AMX tiles when vLLM's CPU platform runs on a CPU with
    them. Returns None when there is nothing to ask (another platform, or
    no AMX), else whether the kernel granted it; says which in the log.
    """
    if not probe.is_cpu_platform() or not probe.has_amx_tiles():
        return None
    granted = probe.request_permission()
    if granted:
        log.info(
            "kvpilot connector: this CPU has AMX and vLLM runs on its CPU platform: requested AMX "
            "tile permission for this process (vLLM's CPU attention uses AMX kernels)"
        )
    else:
        log.warning(
            "kvpilot connector: this CPU has AMX but Linux refused AMX tile permission "
            "(arch_prctl ARCH_REQ_XCOMP_PERM); vLLM's CPU attention may die with SIGILL: run "
            "vLLM with --dtype float16 to keep it off its AMX kernels"
        )
    return granted
