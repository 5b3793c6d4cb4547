"""kvpilot.layout: validation and geometry (sdk/enginewire's)."""

from __future__ import annotations

import numpy as np
import pytest

from kvpilot.errors import InvalidLayout
from kvpilot.layout import (
    LAYER_MAJOR,
    PAGE_MAJOR,
    Buffer,
    Layout,
    RopeSlice,
    canonical_dtype,
    dtype_name,
    dtype_size,
    numpy_dtype,
)

# MLA-like: one fused buffer plus a second of another width, fp16.
MLA = Layout(
    "mla",
    4,
    "fp16",
    3,
    [Buffer("kv", 1, 12), Buffer("pe", 2, 4)],
    RopeSlice(1, 0, 4, "interleaved"),
)


def test_sizes() -> None:
    assert MLA.elem_bytes == 2
    assert MLA.row_bytes(0) == 24 and MLA.row_bytes(1) == 16
    assert MLA.segment_bytes(0) == 96 and MLA.segment_bytes(1) == 64
    assert MLA.layer_page_bytes() == 160 and MLA.page_bytes() == 480
    assert MLA.page_segment_offset(0, 0) == 0
    assert MLA.page_segment_offset(0, 1) == 96
    assert MLA.page_segment_offset(2, 1) == 2 * 160 + 96


def test_arena_offsets_tile_the_arena() -> None:
    """In both arrangements every (slot, layer, buf) segment is a distinct,
    non-overlapping range and together they cover the arena exactly."""
    slots = 5
    for arr in (PAGE_MAJOR, LAYER_MAJOR):
        ranges = sorted(
            (MLA.arena_segment_offset(arr, slots, s, layer, b), MLA.segment_bytes(b))
            for s in range(slots)
            for layer in range(MLA.layers)
            for b in range(2)
        )
        pos = 0
        for off, n in ranges:
            assert off == pos
            pos += n
        assert pos == slots * MLA.page_bytes()


def test_layer_major_regions() -> None:
    # One [slots * page_size, heads, head_dim] region per (layer, buffer),
    # layers outermost: slot s of (l, b) at region + s * segment.
    slots = 5
    region_l1_b1 = 1 * slots * 160 + slots * 96
    assert MLA.arena_segment_offset(LAYER_MAJOR, slots, 3, 1, 1) == region_l1_b1 + 3 * 64
    assert MLA.arena_segment_offset(PAGE_MAJOR, slots, 3, 1, 1) == 3 * 480 + 160 + 96


@pytest.mark.parametrize(
    ("layout", "needle"),
    [
        (Layout("m", 0, "bf16", 1, [Buffer("k", 1, 8)]), "page_size 0"),
        (Layout("m", 4, "int8", 1, [Buffer("k", 1, 8)]), "dtype 'int8'"),
        (Layout("m", 4, "bf16", 0, [Buffer("k", 1, 8)]), "layers 0"),
        (Layout("m", 4, "bf16", 1, []), "no buffers"),
        (Layout("m", 4, "bf16", 1, [Buffer("k", 0, 8)]), "buffers[0] 'k'"),
        (Layout("m", 4, "bf16", 1, [Buffer("k", 1, 8)], RopeSlice(1, 0, 8)), "rope buffer 1"),
        (Layout("m", 4, "bf16", 1, [Buffer("k", 1, 8)], RopeSlice(0, 4, 6)), "rope slice [4, 10)"),
        (Layout("m", 4, "bf16", 1, [Buffer("k", 1, 8)], RopeSlice(0, 0, 3)), "rope slice"),
        (Layout("m", 4, "bf16", 1, [Buffer("k", 1, 8)], RopeSlice(0, 0, 8, "neox")), "rope style"),
    ],
)
def test_validate(layout, needle) -> None:
    with pytest.raises(InvalidLayout) as e:
        layout.validate()
    assert needle in e.value.detail and e.value.hint


def test_mha_and_dtypes() -> None:
    lay = Layout.mha("m", page_size=16, dtype="bf16", layers=2, kv_heads=2, head_dim=64)
    lay.validate()
    assert [b.name for b in lay.buffers] == ["k", "v"] and lay.rope == RopeSlice(0, 0, 64)
    assert (
        Layout.mha(
            "m", page_size=1, dtype="fp32", layers=1, kv_heads=1, head_dim=8, rope_dim=0
        ).rope
        is None
    )
    assert dtype_size("fp8_e5m2") == 1 and dtype_size("nope") == 0
    assert canonical_dtype("bfloat16") == "bf16" and canonical_dtype("fp8") == "fp8_e4m3"
    assert numpy_dtype("bf16") == np.uint16 and numpy_dtype("fp32") == np.float32
    assert numpy_dtype("fp16") == np.float16 and numpy_dtype("fp8_e4m3") == np.uint8
    assert dtype_name(np.float32) == "fp32"
    with pytest.raises(InvalidLayout):
        canonical_dtype("int4")


def test_torch_dtypes() -> None:
    torch = pytest.importorskip(
        "torch", reason="torch is not installed here: pip install 'kvpilot[torch]', or make py-env"
    )
    from kvpilot.layout import torch_dtype

    for name, td in [
        ("bf16", torch.bfloat16),
        ("fp8_e4m3", torch.float8_e4m3fn),
        ("fp8_e5m2", torch.float8_e5m2),
    ]:
        assert torch_dtype(name) == td and dtype_name(td) == name
