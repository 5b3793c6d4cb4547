"""Where a page's keys and values sit inside a vLLM KV cache block.

vLLM hands a connector each attention layer's cache as a logical
``[blocks, heads, tokens, content]`` view (content = K and V of one head,
``2 * head_size`` elements). What the content means is the attention
backend's own business: FlashAttention stores ``[K | V]`` per token, while
the CPU backend (CPU_ATTN) reads each head's block as ``2 * tokens`` rows of
``head_size`` and keeps its keys dim-major and its values token-major. A
connector that guessed would copy scrambled pages into kvpilot, and kvpilot
would rotate the wrong elements when it splices.

So nothing is guessed: ``probe`` asks the layer's own cache-write kernel
(``impl.do_kv_cache_update``, what vLLM runs on every forward) to store
known keys and values into one block, and reads back where each element
landed. The result is a BlockMap, an index from every ``(token, head, dim)``
of K and of V to its element within a block; reading a page out of a vLLM
block into kvpilot's ``[page_size, heads, head_dim]`` staging pages (a
save) is then a gather through it. When both maps are affine in a block
laid out densely (every backend vLLM ships today), the read goes through
strided views instead of an index. Loads need no map: they write pages
with the same kernel (kvpilot.vllm.worker), except into a quantized (fp8)
cache, whose kernel would quantize the saved bytes again: those are written
back through the map (``pages_into``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from kvpilot.layout import as_bits
from kvpilot.vllm.settings import LOGGER_NAME

if TYPE_CHECKING:
    from collections.abc import Sequence

log = logging.getLogger(LOGGER_NAME)


class BlockMapError(RuntimeError):
    """The backend stores K/V in a way the connector cannot map exactly."""


@dataclass(frozen=True)
class Affine:
    """``position = base + token * t + head * h + dim * d`` within a block."""

    base: int
    t: int
    h: int
    d: int

    def describe(self) -> str:
        """The map as strides, e.g. ``+0 t*1 h*2048 d*32``."""
        return f"+{self.base} t*{self.t} h*{self.h} d*{self.d}"


@dataclass(frozen=True)
class BlockMap:
    """Where each K and V element of a page sits within one block.

    ``k_index[(t * heads + h) * head_dim + d]`` is the position of key
    element ``(t, h, d)`` in the block's elements flattened in logical
    ``[heads, tokens, content]`` order; ``v_index`` likewise for values.
    """

    page_size: int
    heads: int
    head_dim: int
    block_shape: tuple[int, ...]
    k_index: torch.Tensor
    v_index: torch.Tensor
    k_affine: Affine | None
    v_affine: Affine | None
    backend: str

    @property
    def page_elems(self) -> int:
        """Elements of one buffer (K or V) in a page."""
        return self.page_size * self.heads * self.head_dim

    def describe(self) -> str:
        """The map in one line, for the start-up log."""
        k = self.k_affine.describe() if self.k_affine else "permuted"
        v = self.v_affine.describe() if self.v_affine else "permuted"
        return f"{self.backend} block {list(self.block_shape)}: K {k}; V {v}"

    # ---------------------------------------------------------------- copies

    def pages_from(
        self, kv_layer: torch.Tensor, block_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the pages in ``block_ids``: two ``[n, page, heads, dim]``
        tensors on the cache's device, as integers of the element size:
        strided views over the cache itself for a run of blocks, else over
        whole blocks gathered with one contiguous copy (when the maps are
        affine), else copies.
        """
        n = int(block_ids.numel())
        if self._affine_views(kv_layer) is not None:
            # A run of blocks is read in place; others are gathered first.
            run = rows(as_bits(kv_layer), block_ids.tolist())
            blocks = run if run is not None else as_bits(kv_layer).index_select(0, block_ids)
            views = self._affine_views(blocks)
            assert views is not None
            return views
        flat = as_bits(kv_layer).index_select(0, block_ids).reshape(n, -1)
        shape = (n, self.page_size, self.heads, self.head_dim)
        k = flat.index_select(1, self.k_index.to(flat.device)).view(shape)
        v = flat.index_select(1, self.v_index.to(flat.device)).view(shape)
        return k, v

    def pages_into(
        self, kv_layer: torch.Tensor, block_ids: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Writes K and V pages (``[n, page, heads, dim]``, any dtype of the
        cache's element size) into the blocks ``block_ids``, bit for bit:
        the load of a cache whose write kernel quantizes (fp8), where a page
        must land as the bytes that were saved.
        """
        views = self._affine_views(kv_layer)
        if views is not None:
            # Strided views over the cache: whole pages a block at a time.
            run = block_ids.tolist()
            for view, pages in zip(views, (k, v), strict=True):
                bits = as_bits(pages).to(view.device)
                into = rows(view, run)
                if into is not None:
                    into.copy_(bits)
                else:
                    view.index_copy_(0, block_ids.to(view.device), bits)
            return
        n = int(block_ids.numel())
        cache = as_bits(kv_layer)  # any strides: indexed as [blocks, heads, tokens, content]
        _, _, tokens, content = cache.shape
        blocks = block_ids.to(cache.device).view(-1, 1)
        for index, pages in ((self.k_index, k), (self.v_index, v)):
            pos = index.to(cache.device).view(1, -1)
            where = (blocks, pos // (tokens * content), pos // content % tokens, pos % content)
            cache.index_put_(where, as_bits(pages).reshape(n, -1).to(cache.device))

    def _affine_views(self, kv_layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Strided ``[blocks, page, heads, dim]`` views of K and V over the
        cache itself, when both maps are affine and each block is dense.
        """
        if self.k_affine is None or self.v_affine is None or not _block_dense(kv_layer):
            return None
        cache = as_bits(kv_layer)
        size = (cache.shape[0], self.page_size, self.heads, self.head_dim)
        out = []
        for a in (self.k_affine, self.v_affine):
            out.append(
                cache.as_strided(
                    size, (cache.stride(0), a.t, a.h, a.d), cache.storage_offset() + a.base
                )
            )
        return out[0], out[1]


def probe(
    layer: Any,
    kv_layer: torch.Tensor,
    page_size: int,
    heads: int,
    head_dim: int,
    *,
    stored: torch.dtype | None = None,
    computed: torch.dtype | None = None,
) -> BlockMap:
    """Learns a BlockMap from the layer's own cache-write kernel.

    Writes known keys and values into block 0 of ``kv_layer`` (vLLM's null
    block, never read for a request; this runs before the first forward)
    through ``layer.impl.do_kv_cache_update`` and restores the block after.
    Each pass stores 1 or 2 per element: one pass tells keys (1) from values
    (2), and one pass per bit of an element's index spells the index, so
    the map is exact in any dtype. Raises BlockMapError when the kernel does
    not store each element of K and V exactly once in the block.

    A quantized cache (fp8) is bytes to vLLM: ``stored`` is the element
    type its bytes hold, ``computed`` the dtype the kernel is handed keys
    and values in; they are scaled by the layer's own scales first, so 1
    and 2 are what lands (exactly, in either fp8 format).
    """
    impl = getattr(layer, "impl", None)
    update = getattr(impl, "do_kv_cache_update", None)
    backend = type(impl).__name__ if impl is not None else type(layer).__name__
    if update is None:
        raise BlockMapError(
            f"attention implementation {backend} has no do_kv_cache_update, so the connector "
            "cannot learn where it stores keys and values"
        )
    if kv_layer.dim() != 4 or kv_layer.shape[1] != heads or kv_layer.shape[2] != page_size:
        raise BlockMapError(
            f"{backend}: KV cache view of shape {list(kv_layer.shape)} is not [blocks, "
            f"{heads} heads, {page_size} tokens, content]"
        )
    n = page_size * heads * head_dim
    bits = max(1, (n - 1).bit_length())
    device = kv_layer.device
    dtype = computed or kv_layer.dtype
    readable = kv_layer.view(stored) if stored is not None else kv_layer
    k_scale = float(getattr(layer, "_k_scale_float", 1.0)) if stored is not None else 1.0
    v_scale = float(getattr(layer, "_v_scale_float", 1.0)) if stored is not None else 1.0
    idx = torch.arange(n, device=device)
    slots = torch.arange(page_size, device=device, dtype=torch.long)
    shape = (page_size, heads, head_dim)
    saved = kv_layer[0].clone()

    def store(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        kv_layer[0].zero_()
        k, v = (k * k_scale).view(shape).to(dtype), (v * v_scale).view(shape).to(dtype)
        update(layer, k, v, kv_layer, slots)
        return readable[0].reshape(-1).to(torch.float32, copy=True)

    try:
        with torch.no_grad():
            ones = torch.ones(n, device=device)
            kind = store(ones, ones * 2)
            planes = []
            for b in range(bits):
                vals = 1.0 + ((idx >> b) & 1).to(torch.float32)
                planes.append(store(vals, vals))
    finally:
        kv_layer[0].copy_(saved)

    bad = ~((kind == 0) | (kind == 1) | (kind == 2))
    if bool(bad.any()):
        raise BlockMapError(
            f"{backend}: storing keys of 1 and values of 2 wrote other values into the block "
            "(a quantizing or scaling cache); the connector copies exact elements only"
        )
    code = torch.zeros(kind.shape, dtype=torch.long, device=device)
    for b, p in enumerate(planes):
        code |= (p > 1.5).long() << b
    k_index = _index(kind == 1, code, n, backend, "keys")
    v_index = _index(kind == 2, code, n, backend, "values")
    bm = BlockMap(
        page_size=page_size,
        heads=heads,
        head_dim=head_dim,
        block_shape=tuple(kv_layer.shape[1:]),
        k_index=k_index.cpu(),
        v_index=v_index.cpu(),
        k_affine=_affine(k_index.cpu(), shape),
        v_affine=_affine(v_index.cpu(), shape),
        backend=backend,
    )
    log.debug("kvpilot connector: %s", bm.describe())
    return bm


def _index(mask: torch.Tensor, code: torch.Tensor, n: int, backend: str, what: str) -> torch.Tensor:
    """Positions of the n elements named by mask, ordered by their code."""
    pos = mask.nonzero().flatten()
    codes = code[pos]
    if pos.numel() != n or not torch.equal(
        torch.sort(codes).values, torch.arange(n, device=codes.device)
    ):
        raise BlockMapError(
            f"{backend}: the block holds {pos.numel()} elements of {what} for a page of {n}, "
            "not each element once; the connector cannot copy its pages exactly"
        )
    out = torch.empty(n, dtype=torch.long, device=codes.device)
    out[codes] = pos
    return out


def _affine(index: torch.Tensor, shape: Sequence[int]) -> Affine | None:
    """The index as base + strides, when it is one."""
    grid = index.view(*shape)
    base = int(grid[0, 0, 0])
    t = int(grid[1, 0, 0]) - base if shape[0] > 1 else 0
    h = int(grid[0, 1, 0]) - base if shape[1] > 1 else 0
    d = int(grid[0, 0, 1]) - base if shape[2] > 1 else 0
    tt = torch.arange(shape[0]).view(-1, 1, 1)
    hh = torch.arange(shape[1]).view(1, -1, 1)
    dd = torch.arange(shape[2]).view(1, 1, -1)
    if torch.equal(grid, base + tt * t + hh * h + dd * d) and min(t, h, d) >= 0:
        return Affine(base, t, h, d)
    return None


def rows(t: torch.Tensor, idx: Sequence[int]) -> torch.Tensor | None:
    """``t[idx]`` as a view when idx is one ascending run, else None."""
    if not idx:
        return None
    a = idx[0]
    if list(idx) != list(range(a, a + len(idx))):
        return None
    return t[a : a + len(idx)]


def _block_dense(kv_layer: torch.Tensor) -> bool:
    """Whether every block's ``[heads, tokens, content]`` is one dense run."""
    _, _, n, c = kv_layer.shape
    return kv_layer.stride()[1:] == (n * c, c, 1)


def probe_mla(layer: Any, kv_layer: torch.Tensor, page_size: int, rank: int, rope_dim: int) -> None:
    """Checks that the MLA layer's own cache-write kernel stores a token's
    latent ``kv_c`` and rotated ``k_pe`` as one row, ``[kv_c | k_pe]``,
    token after token in a block (``[blocks, page_size, rank + rope_dim]``),
    which is the page kvpilot holds; restores block 0 after.

    Raises BlockMapError when it does not.
    """
    impl = getattr(layer, "impl", None)
    update = getattr(impl, "do_kv_cache_update", None)
    backend = type(impl).__name__ if impl is not None else type(layer).__name__
    width = rank + rope_dim
    if update is None or kv_layer.dim() != 3 or tuple(kv_layer.shape[1:]) != (page_size, width):
        raise BlockMapError(
            f"{backend}: an MLA cache of shape {list(kv_layer.shape)} (want [blocks, "
            f"{page_size}, {width}]) written without do_kv_cache_update is not one the "
            "connector can copy exactly"
        )
    n = page_size * width
    want = torch.arange(1, n + 1, dtype=torch.float32).remainder(251).view(page_size, width)
    slots = torch.arange(page_size, dtype=torch.long, device=kv_layer.device)
    saved = kv_layer[0].clone()
    try:
        with torch.no_grad():
            vals = want.to(kv_layer.dtype).to(kv_layer.device)
            kv_c, k_pe = vals[:, :rank].contiguous(), vals[:, rank:].unsqueeze(1).contiguous()
            scale = getattr(layer, "_k_scale", torch.tensor(1.0))
            update(kv_c, k_pe, kv_layer, slots, "auto", scale)
            got = kv_layer[0].to(torch.float32, copy=True).cpu()
    finally:
        kv_layer[0].copy_(saved)
    if not torch.equal(got, want):
        raise BlockMapError(
            f"{backend}: the MLA kernel did not store [kv_c | k_pe] row by row; the connector "
            "cannot copy its pages exactly"
        )
