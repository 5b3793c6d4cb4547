"""vLLM's CPU attention cache write, callable without a vLLM engine."""

from __future__ import annotations

from typing import Any

import torch


class CpuAttention:
    """An attention implementation whose ``do_kv_cache_update`` is vLLM's
    CPUAttentionBackendImpl's: the CPU kernel ``cpu_attn_reshape_and_cache``
    on the ``[blocks, heads, 2 * block, head_size]`` view of the layer cache.
    """

    def do_kv_cache_update(
        self,
        layer: Any,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        from vllm import _custom_ops as ops

        n, h, b, _ = kv_cache.size()
        k_cache, v_cache = kv_cache.view(n, h, 2 * b, -1).chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(
            key, value, k_cache, v_cache, slot_mapping, "vec", k_scale=1.0, v_scale=1.0
        )
