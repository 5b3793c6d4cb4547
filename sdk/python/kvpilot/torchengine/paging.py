"""Where a request's rows live in a paged arena, and moving them.

A row is one token's K/V in one (layer, buffer): row ``r`` of page ``slot``.
``Rows`` holds a run of row addresses as two index tensors, so gathering the
context of a layer and scattering the new tokens' rows are one indexing
operation each on the arena's per-(layer, buffer) tensor
``[slots, page_size, heads, head_dim]``, which aliases the host's memory.

``LocalArena`` is an arena of the same shape in private memory, for running
the paged forward without a host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from kvpilot.layout import Layout, torch_dtype


class TensorSource(Protocol):
    """An arena as the forward sees it (kvpilot.arena.Arena, LocalArena)."""

    def tensor(self, layer: int, buf: int) -> torch.Tensor:
        """The ``[slots, page_size, heads, head_dim]`` view of (layer, buf)."""
        ...


@dataclass(frozen=True)
class Rows:
    """Row addresses in token order: token i sits in row ``row[i]`` of page
    ``slot[i]``.
    """

    slot: torch.Tensor
    row: torch.Tensor

    def __len__(self) -> int:
        return int(self.slot.numel())

    def __add__(self, other: Rows) -> Rows:
        return Rows(torch.cat((self.slot, other.slot)), torch.cat((self.row, other.row)))

    @classmethod
    def empty(cls) -> Rows:
        """No rows."""
        z = torch.zeros(0, dtype=torch.long)
        return cls(z, z)

    @classmethod
    def span(cls, slots: Sequence[int], page_size: int, start: int, count: int) -> Rows:
        """Rows ``[start, start + count)`` of the pages ``slots`` taken as one
        run (row ``start`` is row ``start % page_size`` of page
        ``slots[start // page_size]``).
        """
        if count <= 0:
            return cls.empty()
        at = torch.arange(start, start + count, dtype=torch.long)
        pages = torch.as_tensor(list(slots), dtype=torch.long)
        last = (start + count - 1) // page_size
        if last >= len(pages):
            raise ValueError(
                f"rows [{start}, {start + count}) need {last + 1} pages, {len(pages)} given"
            )
        return cls(pages[at // page_size], at % page_size)


def _flat(t: torch.Tensor) -> bool:
    # Pages and their rows form one run of rows (a layer-major arena, a
    # LocalArena): rows can be picked by one index instead of two.
    return t.stride(0) == t.shape[1] * t.stride(1)


def _take(t: torch.Tensor, rows: Rows, out: torch.Tensor | None = None) -> torch.Tensor:
    """Copies of ``rows`` of one buffer ``t``, into ``out`` if given (of
    ``t``'s dtype).
    """
    if not _flat(t):
        got = t[rows.slot, rows.row]
        return got if out is None else out.copy_(got)
    flat = t.view(-1, *t.shape[2:])
    at = rows.slot * t.shape[1] + rows.row
    if out is None:
        return flat.index_select(0, at)
    return torch.index_select(flat, 0, at, out=out)


def gather(src: TensorSource, layer: int, nbufs: int, rows: Rows) -> tuple[torch.Tensor, ...]:
    """The rows of each buffer of ``layer``: ``[len(rows), heads, head_dim]``
    copies (in the arena's dtype).
    """
    return tuple(_take(src.tensor(layer, b), rows) for b in range(nbufs))


def gather_before(
    src: TensorSource, layer: int, rows: Rows, tails: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """For each buffer b of ``layer``, its ``rows`` followed by ``tails[b]``
    in one tensor of the tail's dtype: what a chunk's new tokens attend to
    (the context's rows, then their own), copied once.
    """
    n = len(rows)
    out = []
    for b, tail in enumerate(tails):
        t = src.tensor(layer, b)
        both = torch.empty((n + tail.shape[0], *tail.shape[1:]), dtype=tail.dtype)
        if t.dtype == tail.dtype:
            _take(t, rows, both[:n])
        else:
            both[:n] = _take(t, rows)
        both[n:] = tail
        out.append(both)
    return tuple(out)


def scatter(src: TensorSource, layer: int, rows: Rows, values: Sequence[torch.Tensor]) -> None:
    """Writes ``values[b]`` (``[len(rows), heads, head_dim]``) into buffer b
    of ``layer`` at ``rows``, in place, cast to the arena's dtype.
    """
    for b, v in enumerate(values):
        t = src.tensor(layer, b)
        t[rows.slot, rows.row] = v.to(t.dtype)


class LocalArena:
    """An arena in private memory with the arena's tensor shape."""

    def __init__(self, layout: Layout, slots: int) -> None:
        dt = torch_dtype(layout.dtype)
        self.layout = layout
        self.slots = slots
        self._t = [
            [
                torch.zeros(slots, layout.page_size, b.heads, b.head_dim, dtype=dt)
                for b in layout.buffers
            ]
            for _ in range(layout.layers)
        ]

    def tensor(self, layer: int, buf: int) -> torch.Tensor:
        """The ``[slots, page_size, heads, head_dim]`` tensor of (layer, buf)."""
        return self._t[layer][buf]

    def clone(self) -> LocalArena:
        """An independent copy of the arena and its rows."""
        out = LocalArena(self.layout, 0)
        out.slots = self.slots
        out._t = [[t.clone() for t in bufs] for bufs in self._t]
        return out
