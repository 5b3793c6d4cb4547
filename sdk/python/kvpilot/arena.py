"""One tier's pool as the engine sees it: a shared mapping of the host's memfd.

The host allocates the pools and hands their descriptors over (see
kvpilot.fdclaim); the engine maps them and reads and writes KV bytes in
place, in the slots a call gave it. Views are zero-copy: ``numpy()``,
``segment()``, ``rows()`` and ``tensor()`` all alias the shared memory, so
what the engine writes through them is what the host (and any other process
mapping the pool) sees.

A note on lifetime: Python refuses to unmap memory while a numpy array or
torch tensor still views it (``BufferError``). ``close()`` therefore unmaps
when it can and otherwise leaves the mapping to die with its last view; the
EngineClient keeps the arenas of earlier registrations (before a host
restart) mapped until the client closes, so no view the engine holds is
pulled out from under it.
"""

from __future__ import annotations

import logging
import mmap
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from kvpilot.layout import ARRANGEMENTS, LAYER_MAJOR, PAGE_MAJOR, Layout, numpy_dtype, torch_dtype

if TYPE_CHECKING:
    import torch

log = logging.getLogger("kvpilot.arena")


class ArenaError(Exception):
    """The arena cannot be mapped or a slot, layer or buffer is out of range."""


class Arena:
    """A tier's pool: a memfd mapping (``kind == "memfd"``) or a CUDA IPC
    handle the engine opens itself (``kind == "cuda_ipc"``, not mapped).

    Attributes:
        tier: ``"device"`` or ``"host"``.
        kind: ``"memfd"`` or ``"cuda_ipc"``.
        slots: pages the arena holds.
        arrangement: ``"page_major"`` or ``"layer_major"`` (kvpilot.layout).
        size_bytes: ``slots * layout.page_bytes()``.
        pinned: the host registered it for DMA.
        staging: a connector-mode device tier: pages pass through it between
            the engine's own memory and kvpilot's; nothing computes in it.
        cuda_ipc: the 64-byte handle of a cuda_ipc arena, on device_ordinal.
        layout: the registered layout.
    """

    def __init__(
        self,
        *,
        tier: str,
        kind: str,
        slots: int,
        arrangement: str,
        size_bytes: int,
        layout: Layout,
        pinned: bool = False,
        staging: bool = False,
        cuda_ipc: bytes = b"",
        device_ordinal: int = 0,
    ) -> None:
        if arrangement not in ARRANGEMENTS:
            raise ArenaError(f"{tier} arena: unknown arrangement {arrangement!r}")
        self.tier = tier
        self.kind = kind
        self.slots = slots
        self.arrangement = arrangement
        self.size_bytes = size_bytes
        self.layout = layout
        self.pinned = pinned
        self.staging = staging
        self.cuda_ipc = cuda_ipc
        self.device_ordinal = device_ordinal
        self._mm: mmap.mmap | None = None
        self._u8: np.ndarray[Any, np.dtype[np.uint8]] | None = None

    def __repr__(self) -> str:
        state = "mapped" if self.mapped else "unmapped"
        return (
            f"Arena(tier={self.tier!r}, kind={self.kind!r}, slots={self.slots}, "
            f"arrangement={self.arrangement!r}, size_bytes={self.size_bytes}, "
            f"staging={self.staging}, {state})"
        )

    def map_fd(self, fd: int) -> None:
        """Maps a memfd arena's descriptor (shared, read-write) after checking
        its size against the layout; the caller keeps and closes ``fd``.
        """
        want = self.layout.page_bytes() * self.slots
        if self.slots < 1 or self.size_bytes != want:
            raise ArenaError(
                f"{self.tier} arena: {self.size_bytes} bytes do not hold {self.slots} pages of "
                f"{self.layout.page_bytes()} bytes: the registered layout and the host disagree"
            )
        size = os.fstat(fd).st_size
        if size != self.size_bytes:
            raise ArenaError(
                f"{self.tier} arena: descriptor is {size} bytes, the host said {self.size_bytes}"
            )
        self._mm = mmap.mmap(
            fd, self.size_bytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE
        )
        self._u8 = np.frombuffer(self._mm, dtype=np.uint8)

    @property
    def mapped(self) -> bool:
        """Whether the arena is mapped in this process."""
        return self._u8 is not None

    def close(self) -> bool:
        """Unmaps the arena. Returns False when views still hold the memory
        (it is then unmapped when the last view is garbage collected).
        """
        mm, self._mm, self._u8 = self._mm, None, None
        if mm is None:
            return True
        try:
            mm.close()
        except BufferError:
            log.debug("%s arena: views still alive; unmapped when they are released", self.tier)
            return False
        return True

    def _mem(self) -> np.ndarray[Any, np.dtype[np.uint8]]:
        if self._u8 is None:
            why = "a CUDA IPC arena (open its handle)" if self.kind == "cuda_ipc" else "closed"
            raise ArenaError(f"{self.tier} arena is not mapped in this process: {why}")
        return self._u8

    def _check(self, slot: int, layer: int, buf: int) -> None:
        if not 0 <= slot < self.slots:
            raise ArenaError(f"{self.tier} arena: slot {slot} outside 0..{self.slots - 1}")
        if not (0 <= layer < self.layout.layers and 0 <= buf < len(self.layout.buffers)):
            raise ArenaError(f"{self.tier} arena: layer {layer} buffer {buf} outside the layout")

    def numpy(self) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """The whole mapping as a writable uint8 array (zero-copy)."""
        return self._mem()

    def segment(self, slot: int, layer: int, buf: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """The live bytes of (layer, buf) of page ``slot``: ``page_size`` rows."""
        mem = self._mem()
        self._check(slot, layer, buf)
        off = self.layout.arena_segment_offset(self.arrangement, self.slots, slot, layer, buf)
        return mem[off : off + self.layout.segment_bytes(buf)]

    def row(self, slot: int, layer: int, buf: int, r: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """The live bytes of one token's row: row ``r`` of page ``slot``."""
        seg = self.segment(slot, layer, buf)
        if not 0 <= r < self.layout.page_size:
            raise ArenaError(
                f"{self.tier} arena: row {r} outside a page of {self.layout.page_size}"
            )
        rb = self.layout.row_bytes(buf)
        return seg[r * rb : (r + 1) * rb]

    def rows(self, slot: int, layer: int, buf: int) -> np.ndarray[Any, Any]:
        """A typed view ``[page_size, heads, head_dim]`` of a segment.

        The dtype is ``layout.numpy_dtype``: bf16 reads as raw uint16 and
        fp8 as raw uint8, since numpy has neither.
        """
        seg = self.segment(slot, layer, buf)
        b = self.layout.buffers[buf]
        return seg.view(numpy_dtype(self.layout.dtype)).reshape(
            self.layout.page_size, b.heads, b.head_dim
        )

    def tensor(self, layer: int, buf: int) -> torch.Tensor:
        """A torch view of every slot of (layer, buf): ``[slots, page_size,
        heads, head_dim]`` in the layout's dtype (zero-copy; imports torch).

        Contiguous for a layer_major arena; a strided view for page_major.
        Index it with the slots a call returned: ``t[slots]`` copies,
        ``t[slot]`` and ``t.index_copy_(0, ...)`` work in place.
        """
        import torch

        mem = self._mem()
        self._check(0, layer, buf)
        lay = self.layout
        b = lay.buffers[buf]
        elem = lay.elem_bytes
        shape = (self.slots, lay.page_size, b.heads, b.head_dim)
        dtype = torch_dtype(lay.dtype)
        if self.arrangement == LAYER_MAJOR:
            off = lay.arena_segment_offset(LAYER_MAJOR, self.slots, 0, layer, buf)
            n = self.slots * lay.segment_bytes(buf)
            return torch.from_numpy(mem[off : off + n]).view(dtype).view(shape)
        assert self.arrangement == PAGE_MAJOR
        whole = torch.from_numpy(mem).view(dtype)
        page = lay.page_bytes() // elem
        stride = (page, b.heads * b.head_dim, b.head_dim, 1)
        return whole.as_strided(shape, stride, lay.page_segment_offset(layer, buf) // elem)

    def read_page(self, slot: int, out: bytearray | memoryview | None = None) -> bytes | None:
        """Copies page ``slot`` in canonical order into ``out`` (page_bytes
        long), or returns it as bytes when ``out`` is None.
        """
        dst = np.empty(self.layout.page_bytes(), np.uint8) if out is None else _as_u8(out)
        self._copy_page(slot, dst, write=False)
        return dst.tobytes() if out is None else None

    def write_page(self, slot: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Copies ``data`` (one page in canonical order) into page ``slot``."""
        self._copy_page(slot, _as_u8(data), write=True)

    def _copy_page(self, slot: int, page: np.ndarray[Any, Any], *, write: bool) -> None:
        lay = self.layout
        if page.nbytes != lay.page_bytes():
            raise ArenaError(
                f"{self.tier} arena: buffer of {page.nbytes} bytes is not one page of "
                f"{lay.page_bytes()}"
            )
        for layer in range(lay.layers):
            for buf in range(len(lay.buffers)):
                seg = self.segment(slot, layer, buf)
                off = lay.page_segment_offset(layer, buf)
                if write:
                    seg[:] = page[off : off + seg.nbytes]
                else:
                    page[off : off + seg.nbytes] = seg


def _as_u8(data: Any) -> np.ndarray[Any, np.dtype[np.uint8]]:
    # A flat byte view of data without copying (reshape of a contiguous
    # array is a view; a non-contiguous one is refused rather than copied,
    # since read_page must write into it).
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise ArenaError("page buffer must be a contiguous array")
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)
