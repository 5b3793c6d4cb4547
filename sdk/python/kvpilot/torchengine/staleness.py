"""How stale a splice left its kept tokens, and which of them to recompute.

After an amortize splice, every token after the edit keeps the K/V its first
prefill computed. Layer 0 is exact once re-rotated (a layer-0 row depends
on the token and its position only), but from layer 1 on each row carries
what the token saw through attention, the removed text included, and the
error compounds from layer to layer and from token to token.

What ``kvpilot bench splice-quality`` measured on SmolLM2-135M-Instruct over
real edits of agent sessions:

- A kept token's staleness (the relative distance of its K/V from a
  re-prefill's, summed over layers and buffers) is largest right after the
  edit and decays with distance: the first tenth of the kept tokens holds
  60-70% of the squared staleness, except where the kept text leaned on the
  removed text all along (a repeated tool output stays stale for hundreds
  of tokens).
- Recomputing the first k tokens after the edit fixes them exactly
  (everything before them is fresh) and buys far more per token than
  recomputing as many tokens scattered by a shallow signal (CacheBlend's
  layer-1 key deviation), which fixes each only in part: a token recomputed
  among stale neighbours keeps part of their staleness.
- How much recompute a splice needs differs from case to case by an order
  of magnitude, so the budget is won or lost in choosing k per splice. A
  sparse probe (every 32nd kept token recomputed among stale neighbours)
  misjudged it: its samples move 0.5 to 4.5 times their true staleness, and
  choosing k by it did worse than the same share for every splice.
- The staleness at the **frontier** does not have that error: once the
  first k are recomputed, the last of them are exact, and the difference
  from their stale rows is their true staleness, for free. The mean KL per
  token of the next turn follows it, times the share of the kept tokens
  still stale: about ``FRONTIER_SCALE`` times the mean staleness of the
  last ``FRONTIER`` tokens recomputed times the share not yet recomputed
  (within a factor of about 3 either way, case to case). The frontier
  stands for the stale tokens after it; the fewer of them are left, the
  less the next turn reads them. Without that share the guard overrated
  what its later blocks leave: on the benchmark's cases its curve, at the
  CacheBlend-style arm's 17.7% recomputed, went from 32.5% below that
  arm's mean KL to 39.9% (at 7.8%, 25% either way; the request's new
  messages cached stale, the benchmark's earlier protocol).
- With the request's new messages prefilled after the splice, as the
  front door does, a truncation often keeps little after its edit (the
  stub's tail and one assistant turn: 95 to 213 tokens in 6 of the 30
  cases), all of it stale, and finishing it costs little. Recomputing all
  the candidates once no more than ``FALLBACK_TOKENS`` are left after a
  block that misses the budget took the guard at its default budget from
  0.0054 to 0.0038 mean KL (saving 78.8% of the region, then 77.2%) and
  its curve at the CacheBlend-style arm's 16.5% from 37% below that arm's
  mean KL to 52% (at 6.5%, from 25% to 31%), in replays of one run; the
  next run, with ``FRONTIER_SCALE`` refit to that protocol, measured
  0.0039 with 80.1% saved, and 52% and 29%.
- What the estimate cannot see is which kept tokens the next turn reads
  (measured with the request's new messages cached stale).
  Where it errs most (two edits whose kept text repeats the removed tool
  output verbatim, and whose next turn reads one line of it) staleness
  does not tell. Replays of the benchmark's paths with other estimates
  (the figures they need from transformers' own forward passes), at 7.8%
  recomputed, below CacheBlend-style's mean KL: the frontier's 25%; every
  kept token's true staleness (of its value rows), at any set of layers,
  at most 31%; the attention of the context's last tokens over the kept
  ones, weighting the frontier's staleness layer by layer, at most 30%
  (weighting every token's true staleness, 36%: a signal that costs the
  recompute it is meant to save); each block's true KL in place of the
  estimate 34%. The bound on every stopping rule on this path, the
  benchmark's ``first_best`` curve (which prices a recomputed token
  instead of meeting a budget per splice), is 55%.
- With the request's new messages prefilled after the splice, replays at
  6.5% recomputed: the frontier's estimate 30% below CacheBlend-style's
  mean KL; the share still stale weighted by attention (the request's
  last tokens, its new messages, the cached context's last tokens, even
  the next turn's own) at most 31%; scaled by the edit's size or the
  kept text's share of the context, at most 33% at 6.5% and at most 50%
  at 16.5% (the frontier's 52%); each block's true KL in place of the
  estimate 36% (and 45% at 16.5%: it keeps recomputing splices that only
  a quarter of their tokens fix). Within a budget per splice the rule,
  not the estimate, is the limit.
- What staleness does not see is an **echo**: kept text that repeats the
  removed text (an answer that paraphrases the reasoning stripped before
  it, a tool output quoted again after the truncated original). Those rows
  were computed while attention could copy from the removed copy, and the
  next turn, which often quotes the same text, reads them. In the edit
  where the guard erred most (stripped reasoning whose answer restates
  it), the first 16 kept tokens measured an estimate of 0.013 against a
  true 0.055, and recomputing 16 more took the next turn's summed KL from
  1.5 to 0.03. The host marks the candidates that lie in a run of 8 tokens
  the removed text holds too (``RecomputeCandidates.echo``), and the guard
  weighs the frontier's staleness by 1 + ``ECHO_WEIGHT`` x the share of it
  that echoes. On the benchmark's cases this took the guard's curve at
  the CacheBlend-style arm's 6.5% from 30% below that arm's mean KL to
  35% (at 16.5%, from 52% to 50%; the default budget's figures
  unchanged); in replays, for runs of 8 to 12 tokens and any weight from
  1 to 4. The gain is that one edit's: leave it out and the echo changes
  nothing at 6.5%; on 26 held-out edits (``--set held-out``, replays) it
  moves the curve by half a point at most. Echoes of a verbatim tool
  output far from the edit (hundreds of tokens on) are marked too, but
  the blocks reach them only where the budget asks for that much anyway.
- On edits none of this was tuned on (``--set held-out``, 47 of them)
  the guard's curve is 9% below CacheBlend-style's mean KL at the 5%
  arm's share and 29% at the 15% arm's, where a price per recomputed
  token that knew the truth (``first_best``) is 48% and 66% below. Three
  other rules, tried there (the first 26 of them) and on the benchmark's
  own edits, get no nearer a third below it. A price on top of the budget
  (past it, recompute the next block while the last one's estimated drop
  per token pays), in replays: at the 5% arm's share 16-28% below that
  arm where the budget alone is 30%, held out 9-13% against 15%; at the
  15% arm's, held out up to 26% against 17%, on the benchmark's edits no
  gain. The first tokens after every edit, not only the first, where an
  edit clears several tool uses: on the five such edits no better than
  the first k at the same count (at most 12% lower, up to 20% higher;
  one keeps 0.011 of its 0.020 with 64 tokens after each of its 8 edits
  recomputed, the first k 0.012). The last kept tokens (nearest
  the request), or half first and half last: on 14 held-out edits, at 16,
  64 and 128 tokens, 0.0064, 0.0052, 0.0055 and 0.0058, 0.0053, 0.0049,
  against the first k's 0.0057, 0.0050, 0.0051 (the splice 0.0065). The
  first k stay the selection.

So ``share`` recomputes the first ``share`` of the kept tokens after the
first edit, and the **quality guard** recomputes them from the edit on,
the first ``FRONTIER`` and then blocks of ``BLOCK_SHARE``, measures the
frontier after each (its staleness, the share still stale, its echo), and
stops at the first whose estimate meets the budget; past
``FALLBACK_SHARE``, or with ``FALLBACK_TOKENS`` or fewer left, it
recomputes them all (a re-prefill of the tail). It computes nothing it
does not keep: every token it runs is a kept token made fresh.

``Sparse`` runs a sparse fill order on an arena in those steps;
``recompute_order`` is the engine's whole order. Recomputing every
candidate without the guard is one pass from the edit on: a re-prefill of
the edited tail, exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvpilot.engine_types import FillOrder
from kvpilot.torchengine.forward import PagedModel
from kvpilot.torchengine.paging import Rows, TensorSource, gather

#: The guard measures the staleness of the last this many tokens of each block.
FRONTIER = 16
#: The guard's calibration (the benchmark's fit: the geometric mean of the
#: measured KL over the estimate, every block of every case, with the
#: request's new messages prefilled after the splice as the front door
#: does): estimated mean KL per token = FRONTIER_SCALE x the frontier's
#: mean staleness x the share of the candidates still stale.
FRONTIER_SCALE = 7.1e-4
#: How much more the guard weighs the frontier's staleness where its tokens
#: echo the removed text (the host's ``echo`` candidates, module doc): the
#: estimate is multiplied by 1 + ECHO_WEIGHT x the share of the frontier
#: that echoes, so a frontier that echoes throughout counts twice.
ECHO_WEIGHT = 1.0
#: The guard recomputes in blocks of this share of the candidates.
BLOCK_SHARE = 0.025
#: Past this share of the candidates the guard recomputes them all.
FALLBACK_SHARE = 0.5
#: With no more than this many candidates left after a block that misses
#: the budget, the guard recomputes them all: one pass finishes what more
#: blocks would nearly cost, and a short tail saves little to trade error
#: for. (The benchmark's replays: 96 to 256 all gain; 128 is 8 pages.)
FALLBACK_TOKENS = 128
#: The budget the benchmark's ``guard`` arm runs at (mean KL per token),
#: the value to set as ``splice.max_kl``; chosen from the benchmark's curve.
DEFAULT_MAX_KL = 0.005


@dataclass
class Recomputed:
    """What a sparse fill order did: kept tokens recomputed (the candidates
    chosen), and the guard's estimate of the mean KL per token left (0 when
    the guard did not run or recomputed them all).
    """

    tokens: int = 0
    estimate: float = 0.0


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


def guard_blocks(n: int, start: int = 0) -> list[int]:
    """Where the guard's blocks end over ``n`` candidates, the first
    ``start`` already fresh: the first ``FRONTIER`` when none are (the
    tokens next to the edit, the stalest: a splice whose frontier is
    already within budget there recomputes no more), then every
    ``BLOCK_SHARE`` of them (at least ``FRONTIER`` tokens) while the block
    before ends within ``FALLBACK_SHARE`` and leaves more than
    ``FALLBACK_TOKENS``; the last block may end at ``n``. There is one block
    at least, unless ``start`` is already past ``FALLBACK_SHARE``.
    """
    block = max(FRONTIER, math.ceil(BLOCK_SHARE * n))
    ends: list[int] = []
    k = start
    if k == 0 and n > FRONTIER:
        k = FRONTIER
        ends.append(k)
    while k < n and k <= FALLBACK_SHARE * n and (not ends or n - k > FALLBACK_TOKENS):
        k = min(n, k + block)
        ends.append(k)
    return ends


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


class Sparse:
    """A sparse fill order on an arena, run in steps (module doc): ``seq``
    holds the rows of positions 0.. of the order's pages.

    Attributes:
        computed: tokens run through the model so far.
    """

    def __init__(self, paged: PagedModel, arena: TensorSource, seq: Rows, o: FillOrder) -> None:
        self.paged, self.arena, self.seq = paged, arena, seq
        self.own_pos = list(o.positions or range(o.position, o.position + len(o.tokens)))
        self.own_tok = list(o.tokens)
        c = o.candidates
        self.cand_pos = list(c.positions) if c is not None else []
        self.cand_tok = list(c.tokens) if c is not None else []
        self.echo = set(c.echo) if c is not None else set()
        self.computed = 0

    def _run(self, tokens: Sequence[int], positions: Sequence[int]) -> None:
        self.paged.recompute(tokens, positions, self.arena, self.seq)
        self.computed += len(positions)

    def _rows(self, positions: Sequence[int]) -> list[tuple[torch.Tensor, ...]]:
        at = Rows(self.seq.slot[list(positions)], self.seq.row[list(positions)])
        return [
            tuple(t.clone() for t in gather(self.arena, i, self.paged.nbufs, at))
            for i in range(self.paged.layers)
        ]

    def run(self, k: int) -> None:
        """One pass over the order's own tokens and the first ``k``
        candidates (all of them: a re-prefill of the tail).
        """
        toks, pos = merge(self.own_tok, self.own_pos, self.cand_tok[:k], self.cand_pos[:k])
        self._run(toks, pos)

    def own(self) -> None:
        """The order's own tokens alone (the replacements, before any
        candidate is recomputed).
        """
        self._run(self.own_tok, self.own_pos)

    def extend(self, done: int, k: int) -> None:
        """Recomputes candidates ``[done, k)``, and the order's own tokens
        among them, after the first ``done`` (and the own tokens before
        them) are fresh.
        """
        if k <= done:
            return
        lo, hi = self.cand_pos[done], self.cand_pos[k - 1]
        own = [(p, t) for p, t in zip(self.own_pos, self.own_tok, strict=True) if lo <= p <= hi]
        toks, pos = merge(
            [t for _, t in own], [p for p, _ in own], self.cand_tok[done:k], self.cand_pos[done:k]
        )
        self._run(toks, pos)

    def block(self, done: int, k: int) -> float:
        """``extend(done, k)``, measuring the frontier: returns the guard's
        estimate of the mean KL per token left with the first ``k`` fresh
        (the module doc).
        """
        w = self.cand_pos[max(done, k - FRONTIER) : k]
        stale = self._rows(w)
        self.extend(done, k)
        left = (len(self.cand_pos) - k) / len(self.cand_pos)
        echo = sum(p in self.echo for p in w) / len(w)
        staleness = float(row_deviation(stale, self._rows(w)).mean())
        return FRONTIER_SCALE * staleness * left * (1 + ECHO_WEIGHT * echo)


def recompute_order(paged: PagedModel, arena: TensorSource, seq: Rows, o: FillOrder) -> Recomputed:
    """Serves a sparse fill order on ``arena`` (module doc)."""
    s = Sparse(paged, arena, seq, o)
    c = o.candidates
    n = len(s.cand_pos)
    if c is None or n == 0 or (c.share <= 0 and c.max_kl <= 0):
        s.run(0)
        return Recomputed()
    floor = min(n, round(c.share * c.region))
    if c.max_kl <= 0 or floor >= n:
        s.run(floor)
        return Recomputed(tokens=floor)
    s.run(floor)
    done = floor
    for k in guard_blocks(n, floor):
        est = s.block(done, k)
        done = k
        if est <= c.max_kl and k < n:
            return Recomputed(tokens=k, estimate=est)
    s.extend(done, n)
    return Recomputed(tokens=n)
