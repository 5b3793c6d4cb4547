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
  edit and decays with distance, except where the kept text leaned on the
  removed text all along (a repeated tool output stays stale for hundreds
  of tokens).
- Recomputing the first k tokens after the edit fixes them exactly
  (everything before them is fresh) and buys far more per token than
  recomputing as many tokens scattered by a shallow signal (CacheBlend's
  layer-1 key deviation), which fixes each only in part: a token recomputed
  among stale neighbours keeps most of their staleness.
- That last fact is also a measurement: a token recomputed among stale
  neighbours moves by a near-constant fraction of its true staleness
  (``PROBE_RATIO``; 0.6 to 1.0 across tokens and cases). So recomputing a sparse
  sample (the **probe**, every ``SAMPLE_EVERY``-th candidate) measures the
  staleness of the whole tail before anything else is recomputed.
- The mean KL per token of the next turn against a re-prefill follows the
  staleness left: about ``GUARD_SCALE`` times the sum of squared staleness
  of the tokens still stale, over the context's length (within a factor of
  two either way).

So ``share`` recomputes the first ``share`` of the kept tokens after the
first edit, and the **quality guard** probes, estimates the KL each first k
would leave (``estimates``), and recomputes the shortest first k, in
blocks of ``BLOCK_SHARE``, whose estimate meets the budget: nothing more
than the probe where staleness is low, more where it is high, and every
kept token (a re-prefill of the tail) when more than ``FALLBACK_SHARE``
would be needed.

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

#: The probe recomputes every this many candidates.
SAMPLE_EVERY = 32
#: What a probed token's move is of its true staleness (the benchmark's
#: median; see the module doc).
PROBE_RATIO = 0.73
#: The guard's calibration: estimated mean KL per token = GUARD_SCALE x
#: (sum of squared staleness left) / (context length).
GUARD_SCALE = 4.0e-4
#: The guard recomputes in blocks of this share of the candidates.
BLOCK_SHARE = 0.05
#: Past this share of the candidates the guard recomputes them all.
FALLBACK_SHARE = 0.5
#: The budget the benchmark's ``guard`` arm runs at (mean KL per token),
#: the value to set as ``splice.max_kl``; chosen from the benchmark's curve.
DEFAULT_MAX_KL = 0.005


@dataclass
class Recomputed:
    """What a sparse fill order did: kept tokens recomputed (the candidates
    chosen, the probe's included), and the guard's estimate of the mean KL
    per token left (0 when the guard did not run or recomputed them all).
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


def interpolate(n: int, sampled: Sequence[int], values: torch.Tensor) -> torch.Tensor:
    """Values for indices ``0..n-1`` from those at ``sampled`` (increasing):
    linear between samples, flat past the ends.
    """
    x = torch.arange(n, dtype=torch.float64)
    xs = torch.as_tensor(list(sampled), dtype=torch.float64)
    ys = values.double()
    if len(xs) == 1:
        return ys.expand(n).clone()
    k = torch.searchsorted(xs, x, right=True).clamp(1, len(xs) - 1)
    x0, x1, y0, y1 = xs[k - 1], xs[k], ys[k - 1], ys[k]
    return y0 + ((x - x0) / (x1 - x0)).clamp(0, 1) * (y1 - y0)


def estimates(staleness: torch.Tensor, context: int) -> torch.Tensor:
    """The guard's estimate of the mean KL per token left when the first k
    candidates are recomputed, for k = 0..n (``staleness`` per candidate, in
    position order; ``context`` the context's length).
    """
    sq = staleness.double() ** 2
    left = torch.cat((sq.flip(0).cumsum(0).flip(0), torch.zeros(1, dtype=torch.float64)))
    return GUARD_SCALE * left / max(context, 1)


def guard_count(est: torch.Tensor, max_kl: float) -> int:
    """How many candidates the guard recomputes (``est`` from ``estimates``):
    the first block boundary whose estimate meets ``max_kl``, or all of them
    past ``FALLBACK_SHARE``.
    """
    n = len(est) - 1
    block = max(1, math.ceil(BLOCK_SHARE * n))
    for k in (*range(0, n, block), n):
        if k > FALLBACK_SHARE * n:
            return n
        if est[k] <= max_kl:
            return k
    return n


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
        computed: tokens run through the model so far (probe included).
        probed: candidate indices the probe recomputed.
    """

    def __init__(self, paged: PagedModel, arena: TensorSource, seq: Rows, o: FillOrder) -> None:
        self.paged, self.arena, self.seq = paged, arena, seq
        self.own_pos = list(o.positions or range(o.position, o.position + len(o.tokens)))
        self.own_tok = list(o.tokens)
        c = o.candidates
        self.cand_pos = list(c.positions) if c is not None else []
        self.cand_tok = list(c.tokens) if c is not None else []
        self.computed = 0
        self.probed: list[int] = []

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
        """The order's own tokens alone (the probe attends to them)."""
        self._run(self.own_tok, self.own_pos)

    def probe(self) -> torch.Tensor:
        """Recomputes every ``SAMPLE_EVERY``-th candidate among the stale
        rest and returns every candidate's staleness: measured at the
        samples (their move over ``PROBE_RATIO``), interpolated between.
        """
        n = len(self.cand_pos)
        self.probed = list(range(0, n, SAMPLE_EVERY))
        pos = [self.cand_pos[k] for k in self.probed]
        stale = self._rows(pos)
        self._run([self.cand_tok[k] for k in self.probed], pos)
        moved = row_deviation(stale, self._rows(pos))
        return interpolate(n, self.probed, moved / PROBE_RATIO)

    def extend(self, done: int, k: int) -> None:
        """Recomputes candidates ``[done, k)``, and the order's own tokens
        among them, after the first ``done`` (and the own tokens before
        them) are fresh.
        """
        lo, hi = self.cand_pos[done], self.cand_pos[k - 1]
        own = [(p, t) for p, t in zip(self.own_pos, self.own_tok, strict=True) if lo <= p <= hi]
        toks, pos = merge(
            [t for _, t in own], [p for p, _ in own], self.cand_tok[done:k], self.cand_pos[done:k]
        )
        self._run(toks, pos)

    def recomputed(self, k: int) -> int:
        """Candidates with fresh rows once the first ``k`` are recomputed."""
        return k + sum(1 for j in self.probed if j >= k)


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
    s.own()
    est = estimates(s.probe(), c.positions[-1] + 1)
    k = max(floor, guard_count(est, c.max_kl))
    s.run(k)
    return Recomputed(tokens=s.recomputed(k), estimate=0.0 if k >= n else float(est[k]))
