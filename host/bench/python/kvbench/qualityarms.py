"""The splice-quality arms computed in torch, on the rows the host cached.

Each builds the edited context's cache in a ``LocalCache`` with the
engine's own passes (kvpilot.torchengine), from rows read back from the
host: the original prefill's, or the plain splice's (re-rotated by
kvpilot's kernels). Positions are the edited context's unless said.

- ``reference``: the re-prefill. The splice's cache with every position
  from the first edit on recomputed in one ``PagedModel.recompute`` pass,
  which attends to the original prefill's rows before the edit: what a
  re-prefill over a prefix cache computes, and exactly what the product's
  own re-prefill of the tail (recompute of every kept token) computes.
- ``gap``: the splice without re-rotation: the kept rows as the original
  prefill left them (their keys at the old positions), each replacement
  prefilled at its old position, and what follows the cached rows (the
  request's new messages, the continuation) numbered on from where the
  original rows end.
- ``cacheblend``: CacheBlend's selection. Every kept token runs layer 0
  against the edited context; its layer-1 key, compared with the cached
  one, is its deviation; the top ``share`` of the edited region by
  deviation is recomputed.
- ``trajectory``: the quality guard's own steps (kvpilot.torchengine.
  staleness), block by block: the cache after each block is the first k
  after the edit recomputed, with the guard's estimate measured there, and
  the guard at any budget stops at one of them. Its candidates carry the
  echoes the host marks (``echo``, as host/splice/echo.go computes them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from kvbench.editcases import Case
from kvbench.localcache import LayerRows, LocalCache
from kvpilot.engine_types import FillOrder, RecomputeCandidates
from kvpilot.torchengine.staleness import Sparse, guard_blocks


@dataclass
class Layout:
    """Where a case's edited context has what, in its own positions.

    ``first`` is the first edit's start; ``cached`` how much of the edited
    context the host caches after the splice (full pages); ``fills`` the
    replacements' (position, token) pairs; ``kept`` the kept positions in
    ``[first, cached)``: the candidates a splice may recompute.
    """

    first: int
    cached: int
    fills: list[tuple[int, int]]
    kept: list[int]


def layout_of(c: Case, page_size: int, cached_from: int) -> Layout:
    """The layout of case ``c`` after a splice on pages of ``page_size``,
    when the original context's first ``cached_from`` tokens were cached.
    """
    cached_orig = cached_from // page_size * page_size
    delta = len(c.edited) - len(c.original)
    cached = (cached_orig + delta) // page_size * page_size
    fills: list[tuple[int, int]] = []
    shift = 0
    for e in c.edits:
        at = e.start + shift
        fills.extend((at + k, t) for k, t in enumerate(e.replacement))
        shift += e.delta
    filled = {p for p, _ in fills}
    first = c.edits[0].start
    kept = [p for p in range(first, cached) if p not in filled]
    return Layout(first=first, cached=cached, fills=fills, kept=kept)


def reference(splice: LocalCache, c: Case, lay: Layout) -> LocalCache:
    """The re-prefill (module doc), from the splice's cache."""
    out = splice.clone()
    pos = list(range(lay.first, lay.cached))
    out.paged.recompute([c.edited[p] for p in pos], pos, out.arena, out.seq)
    return out


def gap(orig: LocalCache, n: int, c: Case) -> tuple[LocalCache, int]:
    """The splice without re-rotation (module doc) of the original
    context's first ``n`` rows; returns the cache, laid out by edited
    positions, and the rotary shift of the positions after it.
    """
    out = orig.clone()
    paged = out.paged
    rows: LayerRows = orig.get(range(n))
    shift = 0
    at_orig = 0
    for e in c.edits:
        # Kept rows before this edit move to their edited index unrotated.
        keep = list(range(at_orig, e.start))
        out.put([tuple(b[keep] for b in layer) for layer in rows], [p + shift for p in keep])
        if e.replacement:
            start = e.start + shift
            ctx = out.prefix(start)
            dest = out.at(range(start, start + len(e.replacement)))
            # The replacement at its old position: rotary start e.start.
            paged.forward(list(e.replacement), e.start, out.arena, ctx, dest, logits=False)
        shift += e.delta
        at_orig = e.end
    keep = list(range(at_orig, n))
    out.put([tuple(b[keep] for b in layer) for layer in rows], [p + shift for p in keep])
    return out, -shift


def layer1_deviation(base: LocalCache, c: Case, positions: Sequence[int]) -> torch.Tensor:
    """CacheBlend's signal: for each kept position, how far its layer-1 key,
    computed from a layer-0 pass against the edited context, is from the
    cached one (L2 over heads). Writes nothing to ``base``.
    """
    work = base.clone()
    paged = work.paged
    toks = [c.edited[p] for p in positions]
    out = []
    for k in range(0, len(positions), paged.chunk):
        pos = list(positions[k : k + paged.chunk])
        h = paged.recompute(toks[k : k + paged.chunk], pos, work.arena, work.seq, layers=1)
        assert h is not None
        layer = paged.inner.layers[1]
        p = torch.as_tensor(pos)[None]
        cos, sin = paged.inner.rotary_emb(h, p)
        _, (key, _v) = paged.adapter.project(layer.self_attn, layer.input_layernorm(h), cos, sin)
        cached = base.get(pos)[1][0]
        out.append((key.float() - cached.float()).flatten(1).norm(dim=1))
    return torch.cat(out)


def recompute(base: LocalCache, c: Case, lay: Layout, positions: Sequence[int]) -> LocalCache:
    """``base`` with the replacements and ``positions`` recomputed in one
    pass (what the product does for kept tokens it is told to recompute).
    """
    out = base.clone()
    by = dict(lay.fills)
    for p in positions:
        by.setdefault(p, c.edited[p])
    pos = sorted(by)
    out.paged.recompute([by[p] for p in pos], pos, out.arena, out.seq)
    return out


#: host/splice/echo.go's EchoGram: the run of tokens echo compares.
ECHO_GRAM = 8


def echo(c: Case, lay: Layout) -> list[int]:
    """The kept positions that echo the removed text: inside a run of
    ``ECHO_GRAM`` tokens of the edited context's ``[first, cached)`` that an
    edit's removed text holds too (what the host sends the guard).
    """
    g = ECHO_GRAM
    grams = {tuple(c.original[s : s + g]) for e in c.edits for s in range(e.start, e.end - g + 1)}
    hit: set[int] = set()
    for s in range(lay.first, lay.cached - g + 1):
        if tuple(c.edited[s : s + g]) in grams:
            hit.update(range(s, s + g))
    return [p for p in lay.kept if p in hit]


def trajectory(
    base: LocalCache,
    c: Case,
    lay: Layout,
    on_step: Callable[[LocalCache, int, float, int], None],
) -> list[int]:
    """The quality guard's path on a copy of ``base``, through the engine's
    own steps (kvpilot.torchengine.staleness.Sparse): the replacements, then
    the first k candidates block by block up to the guard's fallback share.
    After every block ``on_step`` gets the cache, k, the guard's estimate
    (its frontier) and the tokens run through the model so far. Returns
    the candidates marked as echoes.
    """
    out = base.clone()
    echoes = echo(c, lay)
    order = FillOrder(
        order_id="local",
        session="",
        tenant="",
        position=min([p for p, _ in lay.fills] + lay.kept[:1]),
        tokens=[t for _, t in lay.fills],
        page_slots=[],
        first_offset=0,
        prefix_page_slots=[],
        positions=[p for p, _ in lay.fills],
        candidates=RecomputeCandidates(
            positions=lay.kept,
            tokens=[c.edited[p] for p in lay.kept],
            region=len(lay.kept),
            echo=echoes,
        ),
    )
    s = Sparse(out.paged, out.arena, out.seq, order)
    s.own()
    done = 0
    for k in guard_blocks(len(lay.kept)):
        est = s.block(done, k)
        done = k
        on_step(out, k, est, s.computed)
    return echoes
