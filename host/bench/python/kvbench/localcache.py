"""A sequence's K/V in private memory, for the arms computed in torch.

``LocalCache`` holds the rows of positions 0.. of one sequence in a
``LocalArena`` (page k is slot k), so the engine's own passes
(``PagedModel.forward`` and ``recompute``, kvpilot.torchengine.staleness)
run on it exactly as they run on the host's arena: the same code, the same
rows, the same numbers. Rows come from the host (``read_cached_layers``:
what kvpilot cached, every layer) or from those passes.

``score`` is teacher forcing: the continuation runs after the context's
rows, and the log-probabilities of each continuation token's prediction
come back.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional as F

from kvpilot.layout import Layout
from kvpilot.torchengine.engine import TorchEngine
from kvpilot.torchengine.forward import PagedModel
from kvpilot.torchengine.paging import LocalArena, Rows, gather, scatter

#: Rows of every layer: ``rows[layer][buffer]`` is ``[tokens, heads, head_dim]``.
LayerRows = list[tuple[torch.Tensor, ...]]


def read_cached_layers(
    e: TorchEngine, tokens: Sequence[int], *, tenant: str = ""
) -> tuple[int, LayerRows]:
    """What kvpilot caches for ``tokens``: the number of cached tokens and
    copies of their rows in every layer (one match, released after).
    """
    c = e.client
    m = c.match(list(tokens), tenant=tenant)
    try:
        rows = [
            e.read_rows(m.page_slots, m.cached_tokens, layer) for layer in range(e.paged.layers)
        ]
        return m.cached_tokens, rows
    finally:
        c.release(m.request_id)


class LocalCache:
    """Rows of one sequence, positions 0 to ``capacity`` (module doc)."""

    def __init__(self, paged: PagedModel, layout: Layout, capacity: int) -> None:
        ps = layout.page_size
        self.paged = paged
        self.layout = layout
        self.slots = -(-capacity // ps)
        self.arena = LocalArena(layout, self.slots)
        self.seq = Rows.span(list(range(self.slots)), ps, 0, self.slots * ps)

    def clone(self) -> LocalCache:
        """An independent copy."""
        out = LocalCache.__new__(LocalCache)
        out.paged, out.layout, out.slots, out.seq = self.paged, self.layout, self.slots, self.seq
        out.arena = self.arena.clone()
        return out

    def at(self, positions: Sequence[int] | torch.Tensor) -> Rows:
        """The row addresses of ``positions``."""
        idx = torch.as_tensor(positions, dtype=torch.long)
        return Rows(self.seq.slot[idx], self.seq.row[idx])

    def put(self, rows: LayerRows, positions: Sequence[int] | torch.Tensor) -> None:
        """Writes ``rows`` (every layer) at ``positions``."""
        at = self.at(positions)
        for layer, bufs in enumerate(rows):
            scatter(self.arena, layer, at, bufs)

    def get(self, positions: Sequence[int] | torch.Tensor) -> LayerRows:
        """Copies of the rows at ``positions``, every layer."""
        at = self.at(positions)
        return [
            tuple(t.clone() for t in gather(self.arena, layer, self.paged.nbufs, at))
            for layer in range(self.paged.layers)
        ]

    def prefix(self, n: int) -> Rows:
        """The addresses of positions ``[0, n)``."""
        return Rows(self.seq.slot[:n], self.seq.row[:n])

    def logits(
        self,
        context: Sequence[int],
        cached: int,
        continuation: Sequence[int],
        *,
        rope_shift: int = 0,
        every: bool = False,
    ) -> torch.Tensor:
        """Teacher forcing: positions ``[cached, len(context))`` of the
        context and the continuation run after the first ``cached`` rows
        (written nowhere); returns the fp32 logits of each continuation
        token's prediction, ``[len(continuation), vocab]`` (with ``every``,
        of every token run: ``continuation_logits`` picks those out).
        ``rope_shift`` moves the new tokens' rotary positions (a cache that
        kept the original positions after an edit: a position gap).
        """
        n = len(context)
        # The first continuation token is predicted at the context's last
        # position, which therefore always runs (as a fully cached prompt's
        # last token does).
        cached = min(cached, n - 1)
        toks = list(context[cached:]) + list(continuation)
        first = 0 if every else n - 1 - cached
        out = self.paged.forward(
            toks,
            cached + rope_shift,
            self.arena,
            self.prefix(cached),
            None,
            every=True,
            logits_from=first,
        )
        assert out is not None
        return out if every else out[: len(continuation)]

    def score(
        self,
        context: Sequence[int],
        cached: int,
        continuation: Sequence[int],
        *,
        rope_shift: int = 0,
    ) -> torch.Tensor:
        """The log-probabilities of each continuation token's prediction
        (``logits`` in float64), ``[len(continuation), vocab]``.
        """
        return log_probs(self.logits(context, cached, continuation, rope_shift=rope_shift))


def continuation_logits(every: torch.Tensor, continuation: Sequence[int]) -> torch.Tensor:
    """The continuation's predictions out of ``LocalCache.logits(every=True)``:
    the rows from the context's last token to the continuation's next to
    last (the last token predicts nothing scored).
    """
    return every[-len(continuation) - 1 : -1]


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities in float64 (KL of near-equal distributions needs it)."""
    return F.log_softmax(logits.double(), dim=-1)
