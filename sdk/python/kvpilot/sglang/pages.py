"""Where a page's keys and values sit in SGLang's host pool, per layout.

SGLang's MHA host pool (``MHATokenToKVPoolHost``) keeps one tensor
``kv_buffer`` with K at ``[0]`` and V at ``[1]``, arranged by
``--hicache-mem-layout``:

==================  ===========================================
layout              ``kv_buffer[k_or_v]`` shape
==================  ===========================================
layer_first         ``[layers, tokens, heads, dim]``
page_first          ``[tokens, layers, heads, dim]``
page_first_direct   ``[pages, layers, page_size, heads, dim]``
page_head           ``[pages, heads, page_size, layers, dim]``
==================  ===========================================

kvpilot's staging arena holds, per (layer, K or V), ``[slots, page_size,
heads, dim]``. ``PoolPages`` gives the same shape over SGLang's pool for each
layout (views, no copy), so a page moves between the two with one gather and
one scatter per (layer, K or V), whatever the layout. Generic (non-v1) calls
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
from kvpilot.sglang.settings import StorageConfigError, StorageSettings

#: The layouts the backend serves.
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")

_FLAG = "--hicache-mem-layout"


def _layer_pages(buf: torch.Tensor, layout: str, layer: int, page_size: int) -> torch.Tensor:
    """``[pages, page_size, heads, dim]`` of one layer of ``buf`` (a pool's
    ``kv_buffer[k_or_v]``, or one flat page reshaped like it).
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
    """The shape of ``kv_buffer[k_or_v]`` holding ``pages`` pages."""
    tokens = pages * page_size
    return {
        "layer_first": (layers, tokens, heads, dim),
        "page_first": (tokens, layers, heads, dim),
        "page_first_direct": (pages, layers, page_size, heads, dim),
        "page_head": (pages, heads, page_size, layers, dim),
    }[layout]


class PoolPages:
    """Page views over one SGLang MHA host pool.

    ``view(layer, buf)`` is ``[pages, page_size, heads, dim]`` over the
    pool's memory, as integers of the element size (copies move bits).
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.layout = str(getattr(pool, "layout", ""))
        self.page_size = int(pool.page_size)
        self.layers = int(pool.layer_num)
        self.heads = int(pool.head_num)
        self.head_dim = int(pool.head_dim)
        self.dtype = pool.dtype
        self._views = {
            (layer, buf): as_bits(
                _layer_pages(pool.kv_buffer[buf], self.layout, layer, self.page_size)
            )
            for layer in range(self.layers)
            for buf in (0, 1)
        }
        self.pages = int(self._views[(0, 0)].shape[0])

    @classmethod
    def of(cls, pool: Any) -> PoolPages:
        """Views over ``pool`` (what ``register_mem_pool_host`` hands the
        backend), or StorageConfigError naming what to change.
        """
        pool = getattr(getattr(pool, "anchor_entry", None), "host_pool", pool)
        name = type(pool).__name__
        if not hasattr(pool, "kv_buffer") or not hasattr(pool, "head_num"):
            raise StorageConfigError(
                f"kvpilot SGLang backend: the host pool is a {name}; kvpilot serves K/V pages of "
                "full-attention MHA/GQA models (MHATokenToKVPoolHost), not MLA, sparse or "
                "hybrid pools: run this model without the kvpilot backend"
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
        try:
            dtype_name(pool.dtype)
        except Exception:
            raise StorageConfigError(
                f"kvpilot SGLang backend: KV cache dtype {pool.dtype} is not one kvpilot stores "
                "(fp32, bf16, fp16, fp8): set --kv-cache-dtype to one of those"
            ) from None
        pages = cls(pool)
        pages.check_meta()
        return pages

    def view(self, layer: int, buf: int) -> torch.Tensor:
        """``[pages, page_size, heads, dim]`` of (layer, K=0 or V=1)."""
        return self._views[(layer, buf)]

    def segments(self) -> Iterator[tuple[int, int]]:
        """Every (layer, buf) in kvpilot's canonical page order."""
        for layer in range(self.layers):
            yield layer, 0
            yield layer, 1

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
        whole = as_bits(flat).reshape(2, *shape)
        return _layer_pages(whole[buf], self.layout, layer, self.page_size)[0]

    def check_meta(self) -> None:
        """Holds the views to ``get_page_buffer_meta``: the first and last
        page of K and V start where SGLang says they do.
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
                want = [self.view(0, 0)[page].data_ptr(), self.view(0, 1)[page].data_ptr()]
            if list(ptrs) != want:
                raise StorageConfigError(
                    f"kvpilot SGLang backend: SGLang's {_FLAG} {self.layout} places page {page} "
                    "elsewhere than kvpilot reads it (get_page_buffer_meta disagrees): start "
                    f"SGLang with another {_FLAG} ({', '.join(LAYOUTS)})"
                )

    def kvpilot_layout(self, model: str, settings: StorageSettings) -> Layout:
        """The layout this pool registers with the host."""
        rope = None
        if settings.rope_theta > 0:
            dim = settings.rope_dim or self.head_dim
            rope = RopeSlice(0, 0, dim, settings.rope_style)
        return Layout(
            model=model,
            page_size=self.page_size,
            dtype=dtype_name(self.dtype),
            layers=self.layers,
            buffers=(
                Buffer("k", self.heads, self.head_dim),
                Buffer("v", self.heads, self.head_dim),
            ),
            rope=rope,
        )
