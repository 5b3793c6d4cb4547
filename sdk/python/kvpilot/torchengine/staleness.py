"""How stale a splice left its kept tokens, and which of them to recompute.

After an amortize splice, every token after the edit keeps the K/V its first
prefill computed. Layer 0 is exact once re-rotated (a layer-0 row depends
on the token and its position only), but from layer 1 on each row carries
what the token saw through attention, the removed text included, and the
error compounds from layer to layer and from token to token: a token
recomputed among stale neighbours inherits their staleness.

What the benchmark measured on SmolLM2-135M-Instruct over real edits
(``kvpilot bench splice-quality``): the relative K/V deviation of a kept
token from a re-prefill, summed over layers, is largest right after the
edit and decays with distance, except where the kept text leaned on the
removed text all along (a repeated tool output: the deviation stays high
for hundreds of tokens). Recomputing the first k tokens after the edit
fixes them exactly (everything before them is fresh) and buys far more
per token than recomputing the same number scattered by a shallow signal
(CacheBlend's layer-1 key deviation), which fixes each token only in
part.

So the engine recomputes in position order: ``share`` takes the first
``share`` of the kept tokens after the first edit. The **quality guard**
measures as it goes: it recomputes the candidates block by block
(``BLOCK_SHARE`` of them, at least ``MIN_BLOCK``), and each block's own
deviation (fresh rows against the stale ones they replace: exact, every
layer) says how stale the tokens after it still are. Its estimate of the
mean KL per token the splice leaves is ``GUARD_SCALE`` times the mean
squared deviation of the last ``TAIL`` tokens recomputed, times the share
of the context still stale (``estimate``); it stops at the first block
whose estimate is within the budget. Past ``FALLBACK_SHARE`` of the
candidates it recomputes all of them: a re-prefill of the tail.

``recompute_order`` serves a sparse fill order on an arena. Every token is
computed once, in position order: the order's own tokens (replacements and
the kept tokens the host named) inside the blocks that run, the rest after
them. Choosing every candidate in one pass (share 1) is a re-prefill of
the edited tail, exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from kvpilot.engine_types import FillOrder
from kvpilot.torchengine.forward import PagedModel
from kvpilot.torchengine.paging import Rows, TensorSource, gather

#: The guard recomputes this share of the candidates per block ...
BLOCK_SHARE = 0.05
#: ... and at least this many tokens.
MIN_BLOCK = 32
#: The estimate reads the deviation of the last this many tokens recomputed.
TAIL = 32
#: The guard's calibration (nats per token per unit of squared deviation
#: per stale share of the context), fitted by kvpilot bench splice-quality.
GUARD_SCALE = 4.0e-4
#: Past this share of the candidates the guard recomputes them all.
FALLBACK_SHARE = 0.5
#: The budget the benchmark's ``guard`` arm runs at (mean KL per token),
#: the value to set as ``splice.max_kl``; chosen from the benchmark's curve.
DEFAULT_MAX_KL = 0.005


@dataclass
class Recomputed:
    """What a sparse fill order did: kept tokens recomputed (the candidates
    chosen), and the guard's estimate of the mean KL per token left (0 when
    the guard did not run).
    """

    tokens: int = 0
    estimate: float = 0.0


@dataclass
class Choice:
    """The candidates chosen (by position), the guard's estimate, the
    deviations it measured (one per chosen candidate, in order; empty
    without the guard), and how many tokens ran through the model.
    """

    positions: list[int] = field(default_factory=list)
    estimate: float = 0.0
    deviation: list[float] = field(default_factory=list)
    computed: int = 0


def row_deviation(
    before: Sequence[Sequence[torch.Tensor]], after: Sequence[Sequence[torch.Tensor]]
) -> torch.Tensor:
    """Per token, the relative L2 distance of its rows ``after`` from
    ``before``, summed over layers and buffers: ``before[l][b]`` and
    ``after[l][b]`` are ``[tokens, heads, head_dim]``.
    """
    dev: torch.Tensor | None = None
    for lb, la in zip(before, after, strict=True):
        for b, a in zip(lb, la, strict=True):
            b64, a64 = b.flatten(1).double(), a.flatten(1).double()
            d = (a64 - b64).norm(dim=1) / b64.norm(dim=1).clamp_min(1e-30)
            dev = d if dev is None else dev + d
    assert dev is not None
    return dev


def estimate(tail_dev: torch.Tensor, stale: int, context: int) -> float:
    """The guard's estimate of the mean KL per token against a re-prefill
    when ``stale`` of the ``context`` tokens stay stale after recomputing a
    block whose last tokens deviated by ``tail_dev`` (module doc).
    """
    if stale <= 0 or context <= 0 or tail_dev.numel() == 0:
        return 0.0
    return GUARD_SCALE * float((tail_dev.double() ** 2).mean()) * stale / context


def merge(
    tokens: Sequence[int],
    positions: Sequence[int],
    more_tokens: Sequence[int],
    more_positions: Sequence[int],
) -> tuple[list[int], list[int]]:
    """Two sets of (token, position) merged by position (no position twice)."""
    by = dict(zip(positions, tokens, strict=True))
    for p, t in zip(more_positions, more_tokens, strict=True):
        by.setdefault(p, t)
    pos = sorted(by)
    return [by[p] for p in pos], pos


class _Runner:
    """Runs an order's tokens and chosen candidates in position order, in
    passes, each covering every token up to its last position not run yet.
    """

    def __init__(self, paged: PagedModel, arena: TensorSource, seq: Rows, o: FillOrder) -> None:
        self.paged, self.arena, self.seq = paged, arena, seq
        positions = o.positions or list(range(o.position, o.position + len(o.tokens)))
        self.own = sorted(zip(positions, o.tokens, strict=True))
        self.next_own = 0
        self.computed = 0

    def run(self, cand_pos: Sequence[int], cand_tok: Sequence[int], upto: float) -> None:
        """Runs the candidates given and the order's own tokens before
        position ``upto`` not run yet.
        """
        own_pos, own_tok = [], []
        while self.next_own < len(self.own) and self.own[self.next_own][0] < upto:
            own_pos.append(self.own[self.next_own][0])
            own_tok.append(self.own[self.next_own][1])
            self.next_own += 1
        toks, pos = merge(own_tok, own_pos, cand_tok, cand_pos)
        self.paged.recompute(toks, pos, self.arena, self.seq)
        self.computed += len(pos)

    def rows(self, positions: Sequence[int]) -> list[tuple[torch.Tensor, ...]]:
        at = Rows(self.seq.slot[list(positions)], self.seq.row[list(positions)])
        return [
            tuple(t.clone() for t in gather(self.arena, i, self.paged.nbufs, at))
            for i in range(self.paged.layers)
        ]


def recompute_order(
    paged: PagedModel,
    arena: TensorSource,
    seq: Rows,
    o: FillOrder,
    *,
    on_block: Callable[[int, float], None] | None = None,
) -> Choice:
    """Serves a sparse fill order on ``arena`` (module doc); ``seq`` holds the
    rows of positions 0.. of the order's pages. Returns the candidates chosen.

    ``on_block`` is told, after each block the guard measured, how many
    candidates are recomputed and its estimate (a benchmark reads the cache
    there: the guard at every budget from one run).
    """
    run = _Runner(paged, arena, seq, o)
    c = o.candidates
    ch = Choice()
    n = len(c.positions) if c is not None else 0
    if c is None or n == 0 or (c.share <= 0 and c.max_kl <= 0):
        run.run([], [], math.inf)
        ch.computed = run.computed
        return ch
    if c.max_kl <= 0:
        k = min(n, max(0, round(c.share * c.region)))
        run.run(c.positions[:k], c.tokens[:k], math.inf)
        ch.positions, ch.computed = list(c.positions[:k]), run.computed
        return ch
    # The guard: blocks in position order, each measured as it is written.
    context = max(c.positions[-1] + 1, 1)
    block = max(MIN_BLOCK, math.ceil(BLOCK_SHARE * n))
    k = max(0, min(n, round(c.share * c.region)))  # a share asked as well is a floor
    if k:
        run.run(c.positions[:k], c.tokens[:k], c.positions[k - 1] + 1)
    est = math.inf
    devs: list[float] = []
    while k < n:
        if k > FALLBACK_SHARE * n:
            run.run(c.positions[k:], c.tokens[k:], math.inf)
            k, est = n, 0.0
            break
        hi = min(n, k + block)
        pos, tok = c.positions[k:hi], c.tokens[k:hi]
        stale = run.rows(pos)
        run.run(pos, tok, pos[-1] + 1)
        dev = row_deviation(stale, run.rows(pos))
        devs.extend(float(d) for d in dev)
        k = hi
        est = estimate(torch.as_tensor(devs[-TAIL:]), context - c.positions[k - 1] - 1, context)
        if on_block is not None:
            on_block(k, est)
        if est <= c.max_kl:
            break
    run.run([], [], math.inf)
    ch.positions, ch.estimate, ch.deviation = list(c.positions[:k]), 0.0 if k >= n else est, devs
    ch.computed = run.computed
    return ch
