"""What the connector registers for a vLLM engine's KV cache, and what it
refuses at start-up with the reason (kvpilot.vllm.geometry; sleep mode,
kvpilot.vllm.connector).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

import torch

from kvpilot.vllm.geometry import check_parallelism, kv_dtype
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


@pytest.mark.parametrize(
    "sizes",
    [
        {"tensor_parallel_size": 2},
        {"pipeline_parallel_size": 2},
        {"decode_context_parallel_size": 2},
    ],
)
def test_parallel_engines_are_refused_with_the_sizes(sizes: dict[str, int]) -> None:
    pc = SimpleNamespace(
        **{
            "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1,
            "decode_context_parallel_size": 1,
            **sizes,
        }
    )
    ((name, n),) = sizes.items()
    with pytest.raises(ConnectorConfigError, match=f"{name}={n}"):
        check_parallelism(SimpleNamespace(parallel_config=pc))


def test_sleep_mode_is_refused() -> None:
    # vLLM 0.33 asks before it unmaps the KV cache for sleep mode; the save
    # thread may still be copying out of it.
    from kvpilot.vllm import KvpilotConnector

    assert KvpilotConnector.supports_sleep_mode(None) is False
