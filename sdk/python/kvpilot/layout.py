"""The byte geometry of a registered KV layout (Go: sdk/enginewire).

An engine registers its KV cache's shape: per layer, one or more buffers
(K and V, or MLA's fused ``[kv_c | k_pe]`` row), each ``heads x head_dim``
elements of ``dtype`` per token, ``page_size`` tokens per page. A page in
canonical order is, for each layer, for each buffer, ``page_size`` rows.

Arenas place pages in one of two arrangements:

- ``page_major``: page after page, each in canonical order;
- ``layer_major``: one region per (layer, buffer), each a tensor
  ``[slots * page_size, heads, head_dim]``, layers outermost.

Every (layer, buffer) segment of a page is contiguous in both. The offsets
here equal sdk/enginewire's byte for byte; the host checks its own pools
against that package.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kvpilot.errors import InvalidLayout

if TYPE_CHECKING:
    import torch

PAGE_MAJOR = "page_major"
LAYER_MAJOR = "layer_major"
ARRANGEMENTS = (PAGE_MAJOR, LAYER_MAJOR)

# Element size of each dtype spelling the host accepts.
_DTYPE_SIZES = {
    "fp32": 4,
    "float32": 4,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}

# Canonical names: the spellings above collapse onto these.
_CANONICAL = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8_e4m3",
}

ROPE_STYLES = ("interleaved", "half_split")


def dtype_size(name: str) -> int:
    """Element size in bytes of a dtype name, or 0 when it is unknown."""
    return _DTYPE_SIZES.get(name, 0)


def canonical_dtype(name: str) -> str:
    """The canonical spelling of a dtype (``"bfloat16"`` -> ``"bf16"``)."""
    if name not in _DTYPE_SIZES:
        raise InvalidLayout(f"dtype {name!r}: want one of fp32, bf16, fp16, fp8_e4m3, fp8_e5m2")
    return _CANONICAL.get(name, name)


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype that holds elements of a layout dtype.

    numpy has no bfloat16 or fp8: bf16 reads as raw ``uint16`` and fp8 as raw
    ``uint8`` (bit patterns, not values; use ``torch_dtype`` for arithmetic).
    """
    return np.dtype(
        {"fp32": np.float32, "bf16": np.uint16, "fp16": np.float16}.get(
            canonical_dtype(name), np.uint8
        )
    )


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a layout dtype (imports torch)."""
    import torch

    return {
        "fp32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp8_e4m3": torch.float8_e4m3fn,
        "fp8_e5m2": torch.float8_e5m2,
    }[canonical_dtype(name)]


def as_bits(t: torch.Tensor) -> torch.Tensor:
    """The same memory as integers of the element size: copies through it
    move bit patterns, never values (fp8 and bf16 included).
    """
    import torch

    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(bits[t.element_size()])


def dtype_name(dtype: Any) -> str:
    """The layout name of a torch or numpy dtype (``torch.bfloat16`` -> ``"bf16"``)."""
    s = str(dtype)
    if s.startswith("torch."):
        s = s.removeprefix("torch.")
    else:
        with contextlib.suppress(TypeError):
            s = np.dtype(dtype).name
    names = {
        "float32": "fp32",
        "bfloat16": "bf16",
        "float16": "fp16",
        "float8_e4m3fn": "fp8_e4m3",
        "float8_e5m2": "fp8_e5m2",
    }
    if s not in names:
        raise InvalidLayout(f"dtype {dtype}: want float32, bfloat16, float16 or a float8")
    return names[s]


@dataclass(frozen=True)
class Buffer:
    """One per-layer KV buffer: ``heads`` x ``head_dim`` elements per token."""

    name: str
    heads: int
    head_dim: int


@dataclass(frozen=True)
class RopeSlice:
    """Which elements of each head of the key buffer are rotated.

    ``buffer`` indexes ``Layout.buffers``; ``[offset, offset + dim)`` of each
    head is rotated, pairing elements ``"interleaved"`` (GPT-J, DeepSeek MLA)
    or ``"half_split"`` (NeoX, Llama, Qwen).
    """

    buffer: int
    offset: int
    dim: int
    style: str = "half_split"


@dataclass(frozen=True)
class RopeScaling:
    """The model config's ``rope_scaling`` (type "", default, linear, llama3, yarn)."""

    type: str = ""
    factor: float = 0.0
    original_max_position: int = 0
    low_freq_factor: float = 0.0
    high_freq_factor: float = 0.0
    beta_fast: float = 0.0
    beta_slow: float = 0.0
    mscale: float = 0.0
    mscale_all_dim: float = 0.0
    attention_factor: float = 0.0
    no_truncate: bool = False


@dataclass(frozen=True)
class RopeConfig:
    """The model's rotary embedding: ``rope_theta`` and ``rope_scaling``.

    Its width and pairing are the layout's RopeSlice; splices rotate keys
    with it.
    """

    base: float = 10000.0
    scaling: RopeScaling = field(default_factory=RopeScaling)


@dataclass(frozen=True)
class Layout:
    """The byte shape of a model's KV cache as an engine registers it.

    ``dtype`` is fp32, bf16, fp16, fp8_e4m3 or fp8_e5m2; ``rope`` is None for
    a model without rotary keys (cacheable, not spliceable).
    """

    model: str
    page_size: int
    dtype: str
    layers: int
    buffers: tuple[Buffer, ...]
    rope: RopeSlice | None = None

    def __post_init__(self) -> None:
        # Accept a list of buffers; keep the dataclass hashable.
        object.__setattr__(self, "buffers", tuple(self.buffers))

    @classmethod
    def mha(
        cls,
        model: str,
        *,
        page_size: int,
        dtype: str,
        layers: int,
        kv_heads: int,
        head_dim: int,
        rope_dim: int | None = None,
        rope_style: str = "half_split",
    ) -> Layout:
        """A K and V layout (MHA, GQA), the whole key head rotated by default.

        ``rope_dim=0`` registers no RoPE slice (a model without rotary keys).
        """
        rope_dim = head_dim if rope_dim is None else rope_dim
        rope = RopeSlice(0, 0, rope_dim, rope_style) if rope_dim else None
        return cls(
            model,
            page_size,
            dtype,
            layers,
            (Buffer("k", kv_heads, head_dim), Buffer("v", kv_heads, head_dim)),
            rope,
        )

    def validate(self) -> None:
        """Checks the geometry this module computes with.

        Raises InvalidLayout naming the field; the host checks the rest
        (limits, names) at registration.
        """
        if self.page_size < 1:
            raise InvalidLayout(f"page_size {self.page_size}")
        if dtype_size(self.dtype) == 0:
            raise InvalidLayout(
                f"dtype {self.dtype!r}: want fp32, bf16, fp16, fp8_e4m3 or fp8_e5m2"
            )
        if self.layers < 1:
            raise InvalidLayout(f"layers {self.layers}")
        if not self.buffers:
            raise InvalidLayout("no buffers")
        for i, b in enumerate(self.buffers):
            if b.heads < 1 or b.head_dim < 1:
                raise InvalidLayout(
                    f"buffers[{i}] {b.name!r}: heads {b.heads}, head_dim {b.head_dim}"
                )
        r = self.rope
        if r is not None:
            if not 0 <= r.buffer < len(self.buffers):
                raise InvalidLayout(f"rope buffer {r.buffer} of {len(self.buffers)}")
            hd = self.buffers[r.buffer].head_dim
            if r.dim < 2 or r.dim % 2 or r.offset < 0 or r.offset + r.dim > hd:
                raise InvalidLayout(
                    f"rope slice [{r.offset}, {r.offset + r.dim}) in a head of {hd}"
                )
            if r.style not in ROPE_STYLES:
                raise InvalidLayout(f"rope style {r.style!r}: want interleaved or half_split")

    @property
    def elem_bytes(self) -> int:
        """Size of one element."""
        return dtype_size(self.dtype)

    def row_bytes(self, buf: int) -> int:
        """Bytes one token occupies in buffer ``buf`` of one layer."""
        b = self.buffers[buf]
        return b.heads * b.head_dim * self.elem_bytes

    def segment_bytes(self, buf: int) -> int:
        """One (layer, buffer) segment of a page: ``page_size`` rows."""
        return self.page_size * self.row_bytes(buf)

    def layer_page_bytes(self) -> int:
        """One layer's share of a page."""
        return sum(self.segment_bytes(b) for b in range(len(self.buffers)))

    def page_bytes(self) -> int:
        """One page in canonical order."""
        return self.layers * self.layer_page_bytes()

    def page_segment_offset(self, layer: int, buf: int) -> int:
        """Where segment (layer, buf) starts in a canonical page."""
        return layer * self.layer_page_bytes() + sum(self.segment_bytes(b) for b in range(buf))

    def arena_segment_offset(
        self, arrangement: str, slots: int, slot: int, layer: int, buf: int
    ) -> int:
        """Where segment (layer, buf) of page ``slot`` starts in an arena of
        ``slots`` pages placed in ``arrangement``.
        """
        if arrangement == PAGE_MAJOR:
            return slot * self.page_bytes() + self.page_segment_offset(layer, buf)
        if arrangement != LAYER_MAJOR:
            raise ValueError(f"arrangement {arrangement!r}: want page_major or layer_major")
        region = layer * slots * self.layer_page_bytes()
        region += sum(slots * self.segment_bytes(b) for b in range(buf))
        return region + slot * self.segment_bytes(buf)
