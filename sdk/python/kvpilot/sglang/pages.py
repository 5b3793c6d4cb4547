"""Where a page's keys and values sit in SGLang's host pool, per layout.

SGLang's MHA host pool (``MHATokenToKVPoolHost``) keeps one tensor
``kv_buffer`` with K at ``[0]`` and V at ``[1]``; its MLA host pool
(``MLATokenToKVPoolHost``) keeps one tensor ``kv_buffer`` of fused rows, the
latent ``kv_c`` (``kv_lora_rank`` elements) then the rotated ``k_pe``
(``qk_rope_head_dim``), one row per token and layer, as one head. Both are
arranged by ``--hicache-mem-layout`` (MLA has no ``page_head``):

==================  ==============================================
layout              ``kv_buffer[k_or_v]`` (MHA), ``kv_buffer`` (MLA)
==================  ==============================================
layer_first         ``[layers, tokens, heads, dim]``
page_first          ``[tokens, layers, heads, dim]``
page_first_direct   ``[pages, layers, page_size, heads, dim]``
page_head           ``[pages, heads, page_size, layers, dim]``
==================  ==============================================

kvpilot's staging arena holds, per (layer, buffer), ``[slots, page_size,
heads, dim]``: buffers K and V for MHA, the one buffer ``kv`` (one head of
``kv_lora_rank + qk_rope_head_dim``) for MLA, as the vLLM connector registers
MLA. ``PoolPages`` gives the same shape over SGLang's pool for each layout
(views, no copy), so a page moves between the two with one gather and one
scatter per (layer, buffer), whatever the layout. Generic (non-v1) calls
pass one page as a flat tensor in the pool's own order; ``flat_segment``
reads it the same way. At attach the views are checked against the pool's
own zero-copy description (``get_page_buffer_meta``), so a layout whose bytes
sit elsewhere than these views say is refused rather than served scrambled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from kvpilot.layout import Buffer, Layout, RopeSlice, as_bits, dtype_name
from kvpilot.sglang.settings import KEY_PREFIX, StorageConfigError, StorageSettings

#: The layouts the backend serves.
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")

#: The layouts it serves for MLA pools: SGLang's MLA pool has no page_head,
#: and describes its pages (get_page_buffer_meta) in these three only.
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")

_FLAG = "--hicache-mem-layout"


def _layer_pages(buf: torch.Tensor, layout: str, layer: int, page_size: int) -> torch.Tensor:
    """``[pages, page_size, heads, dim]`` of one layer of ``buf`` (an MHA
    pool's ``kv_buffer[k_or_v]``, an MLA pool's ``kv_buffer``, or one flat
    page reshaped like it).
    """
    if layout == "layer_first":
        return buf[layer].unflatten(0, (-1, page_size))
    if layout == "page_first":
        return buf[:, layer].unflatten(0, (-1, page_size))
    if layout == "page_first_direct":
        return buf[:, layer]
    if layout == "page_head":
        return buf[:, :, :, layer].transpose(1, 2)
    raise AssertionError(layout)


def _buffer_shape(
    layout: str, pages: int, layers: int, page_size: int, heads: int, dim: int
) -> tuple[int, ...]:
    """The shape of one buffer (``kv_buffer[k_or_v]``, MLA's ``kv_buffer``)
    holding ``pages`` pages.
    """
    tokens = pages * page_size
    return {
        "layer_first": (layers, tokens, heads, dim),
        "page_first": (tokens, layers, heads, dim),
        "page_first_direct": (pages, layers, page_size, heads, dim),
        "page_head": (pages, heads, page_size, layers, dim),
    }[layout]


class PoolPages:
    """Page views over one SGLang host pool: MHA (K and V) or MLA (one fused
    latent row a token).

    ``view(layer, buf)`` is ``[pages, page_size, heads, dim]`` over the
    pool's memory, as integers of the element size (copies move bits).
    """

    def __init__(self, pool: Any, *, mla: bool) -> None:
        self.pool = pool
        self.mla = mla
        self.layout = str(getattr(pool, "layout", ""))
        self.page_size = int(pool.page_size)
        self.layers = int(pool.layer_num)
        self.dtype = pool.dtype
        if mla:
            self.buffers: tuple[str, ...] = ("kv",)
            self.heads = 1
            self.head_dim = int(pool.kv_cache_dim)
            # The rotated k_pe follows the latent kv_c in every row.
            self.rope_offset = int(pool.kv_lora_rank)
            self.rope_width = int(pool.qk_rope_head_dim)
            tensors: tuple[torch.Tensor, ...] = (pool.kv_buffer,)
        else:
            self.buffers = ("k", "v")
            self.heads = int(pool.head_num)
            self.head_dim = int(pool.head_dim)
            self.rope_offset = 0
            self.rope_width = self.head_dim
            tensors = (pool.kv_buffer[0], pool.kv_buffer[1])
        self._views = {
            (layer, buf): as_bits(_layer_pages(t, self.layout, layer, self.page_size))
            for layer in range(self.layers)
            for buf, t in enumerate(tensors)
        }
        self.pages = int(self._views[(0, 0)].shape[0])

    @classmethod
    def of(cls, pool: Any) -> PoolPages:
        """Views over ``pool`` (what ``register_mem_pool_host`` hands the
        backend), or StorageConfigError naming what to change.
        """
        pool = getattr(getattr(pool, "anchor_entry", None), "host_pool", pool)
        name = type(pool).__name__
        if hasattr(pool, "kv_lora_rank"):
            _check_mla(pool, name)
            pages = cls(pool, mla=True)
        else:
            _check_mha(pool, name)
            pages = cls(pool, mla=False)
        pages.check_meta()
        return pages

    def view(self, layer: int, buf: int) -> torch.Tensor:
        """``[pages, page_size, heads, dim]`` of (layer, buffer): K=0 or
        V=1 for MHA, 0 (the fused row) for MLA.
        """
        return self._views[(layer, buf)]

    def segments(self) -> Iterator[tuple[int, int]]:
        """Every (layer, buf) in kvpilot's canonical page order."""
        for layer in range(self.layers):
            for buf in range(len(self.buffers)):
                yield layer, buf

    def page_indices(self, host_indices: torch.Tensor, n: int) -> torch.Tensor:
        """The pool page of each of the first ``n`` pages of ``host_indices``
        (token rows, page-aligned, ``page_size`` per page).
        """
        first = host_indices.reshape(-1)[: n * self.page_size : self.page_size]
        return (first.to(torch.long) // self.page_size).cpu()

    def flat_segment(self, flat: torch.Tensor, layer: int, buf: int) -> torch.Tensor:
        """``[page_size, heads, dim]`` of (layer, buf) in one flat page (the
        generic calls' ``get_data_page`` format), as integers.
        """
        shape = _buffer_shape(
            self.layout, 1, self.layers, self.page_size, self.heads, self.head_dim
        )
        whole = as_bits(flat).reshape(len(self.buffers), *shape)
        return _layer_pages(whole[buf], self.layout, layer, self.page_size)[0]

    def check_meta(self) -> None:
        """Holds the views to ``get_page_buffer_meta``: the first and last
        page of every buffer start where SGLang says they do.
        """
        meta = getattr(self.pool, "get_page_buffer_meta", None)
        if meta is None or self.pages == 0:
            return
        ps = self.page_size
        for page in {0, self.pages - 1}:
            rows = torch.arange(page * ps, (page + 1) * ps, dtype=torch.int64)
            ptrs, _ = meta(rows)
            if self.layout == "layer_first":
                want = [self.view(layer, buf)[page].data_ptr() for layer, buf in self.segments()]
            else:
                want = [self.view(0, b)[page].data_ptr() for b in range(len(self.buffers))]
            if list(ptrs) != want:
                raise StorageConfigError(
                    f"kvpilot SGLang backend: SGLang's {_FLAG} {self.layout} places page {page} "
                    "elsewhere than kvpilot reads it (get_page_buffer_meta disagrees): start "
                    f"SGLang with another {_FLAG} ({', '.join(self._layouts())})"
                )

    def _layouts(self) -> tuple[str, ...]:
        return MLA_LAYOUTS if self.mla else LAYOUTS

    def describe(self) -> str:
        """The page geometry in words, for the attach log."""
        if self.mla:
            return f"MLA rows of {self.rope_offset} latent + {self.rope_width} rope elements"
        return f"{self.heads} heads of {self.head_dim}"

    def kvpilot_layout(self, model: str, settings: StorageSettings) -> Layout:
        """The layout this pool registers with the host: K and V of the
        rank's heads (MHA), or the one fused row (MLA) with its rotated
        ``k_pe`` after the latent, which DeepSeek's models rotate pairing
        adjacent elements (``interleaved``) unless ``rope_style`` says
        otherwise.
        """
        rope = None
        if settings.rope_theta > 0:
            style = settings.rope_style or ("interleaved" if self.mla else "half_split")
            if self.mla and settings.rope_dim not in (0, self.rope_width):
                raise StorageConfigError(
                    f"kvpilot SGLang backend: rope_dim = {settings.rope_dim} in {KEY_PREFIX}, "
                    f"but this MLA pool rotates the last {self.rope_width} elements of each row "
                    "(qk_rope_head_dim): drop rope_dim, or set it to that"
                )
            dim = settings.rope_dim or self.rope_width
            rope = RopeSlice(0, self.rope_offset, dim, style)
        return Layout(
            model=model,
            page_size=self.page_size,
            dtype=dtype_name(self.dtype),
            layers=self.layers,
            buffers=tuple(Buffer(n, self.heads, self.head_dim) for n in self.buffers),
            rope=rope,
        )


def _check_dtype(pool: Any) -> None:
    try:
        dtype_name(pool.dtype)
    except Exception:
        raise StorageConfigError(
            f"kvpilot SGLang backend: KV cache dtype {pool.dtype} is not one kvpilot stores "
            "(fp32, bf16, fp16, fp8): set --kv-cache-dtype to one of those"
        ) from None


def _check_mha(pool: Any, name: str) -> None:
    """Refuses an MHA-like pool kvpilot cannot serve, naming what to change."""
    if not hasattr(pool, "kv_buffer") or not hasattr(pool, "head_num"):
        raise StorageConfigError(
            f"kvpilot SGLang backend: the host pool is a {name}; kvpilot serves K/V pages of "
            "full-attention MHA/GQA models (MHATokenToKVPoolHost) and MLA latent pages "
            "(MLATokenToKVPoolHost), not sparse or hybrid pools: run this model without the "
            "kvpilot backend"
        )
    layout = getattr(pool, "layout", "")
    if layout not in LAYOUTS:
        raise StorageConfigError(
            f"kvpilot SGLang backend: {_FLAG} {layout} is not a layout kvpilot serves: start "
            f"SGLang with {_FLAG} set to one of {', '.join(LAYOUTS)}"
        )
    vdim = getattr(pool, "v_head_dim", pool.head_dim)
    if vdim != pool.head_dim:
        raise StorageConfigError(
            f"kvpilot SGLang backend: keys of {pool.head_dim} and values of {vdim} elements "
            "per head: SGLang's host pool describes its pages for equal widths only"
        )
    _check_dtype(pool)


def _check_mla(pool: Any, name: str) -> None:
    """Refuses an MLA pool whose pages are not whole fused rows in this
    process's buffer, naming what to change.
    """
    if getattr(pool, "kv_buffer", None) is None or getattr(pool, "_layer_shard_enabled", False):
        # Allocator-only (the rows live elsewhere) or layer-sharded across
        # ranks (each rank holds some layers of every page).
        raise StorageConfigError(
            f"kvpilot SGLang backend: this {name} does not hold every layer's rows in its own "
            "buffer (an allocator-only or layer-sharded MLA pool); kvpilot stores whole pages: "
            "run this model without the kvpilot backend"
        )
    layout = getattr(pool, "layout", "")
    if layout not in MLA_LAYOUTS:
        raise StorageConfigError(
            f"kvpilot SGLang backend: {_FLAG} {layout} is not a layout kvpilot serves for an MLA "
            f"model: start SGLang with {_FLAG} set to one of {', '.join(MLA_LAYOUTS)}"
        )
    rank, rope, width = pool.kv_lora_rank, pool.qk_rope_head_dim, pool.kv_cache_dim
    if rank <= 0 or rope <= 0 or width != rank + rope:
        # fp8 DSA packs scales into wider rows, which no RoPE slice describes.
        raise StorageConfigError(
            f"kvpilot SGLang backend: MLA rows of {width} elements are not kv_lora_rank {rank} "
            f"plus qk_rope_head_dim {rope} (a packed fp8 row): run with --kv-cache-dtype auto, "
            "or without the kvpilot backend"
        )
    if getattr(pool, "dcp_size", 1) != 1:
        raise StorageConfigError(
            "kvpilot SGLang backend: decode context parallelism splits every MLA page across "
            "ranks; run without --dcp-size, or without the kvpilot backend"
        )
    _check_dtype(pool)
