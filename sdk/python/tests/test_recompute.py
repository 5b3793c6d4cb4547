"""Recompute and the quality guard through a real host.

A TorchEngine (arena mode, registered with recompute) caches a session in
a real ``kvpilot serve``; a Splice directive asks for kept tokens to be
recomputed; the host plans one sparse fill order and the engine serves it
(kvpilot.torchengine.staleness). The rows read back from the host's arena
are compared bit for bit with the same passes run in private memory on the
rows cached before: a splice that recomputes every kept token is then a
re-prefill of the edited tail, exactly, and one that recomputes the first
k recomputes those and moves the rest. A host configured to recompute
refuses an engine that cannot, and a directive asking an engine that
cannot is refused.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here: pip install 'kvpilot[torch]', or make py-env"
)
pytest.importorskip(
    "transformers",
    reason="transformers is not installed here: pip install 'kvpilot[torch]', or make py-env",
)

from kvbench.localcache import LocalCache, read_cached_layers  # noqa: E402
from kvbench.scenario import host_config  # noqa: E402
from kvpilot import directives  # noqa: E402
from kvpilot.control import ControlClient  # noqa: E402
from kvpilot.engine import EngineClient  # noqa: E402
from kvpilot.errors import RecomputeUnsupported  # noqa: E402
from kvpilot.torchengine import models, staleness  # noqa: E402
from kvpilot.torchengine.engine import TorchEngine  # noqa: E402
from kvpilot.torchengine.fills import FillServer  # noqa: E402
from kvpilot.torchengine.rope import rope_config  # noqa: E402

PS = 16


def tokens(vocab: int, n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def _splice_and_read(h, tm, rec: dict, *, edit=(37, 101), tau_len=13, quote=0):  # type: ignore[no-untyped-def]
    """Caches 400 tokens as session s, splices [37, 101) by τ with ``rec``
    (directives.splice's recompute arguments); returns the engine's rows of
    the original and the edited sequence (every layer), the sequences, the
    fill server and the directive's result. With ``quote``, the text after
    the edit repeats the first ``quote`` tokens it removes.
    """
    toks = tokens(tm.vocab_size, 400, 3)
    toks[edit[1] : edit[1] + quote] = toks[edit[0] : edit[0] + quote]
    tau = tokens(tm.vocab_size, tau_len, 4)
    start, end = edit
    edited = toks[:start] + tau + toks[end:]
    with TorchEngine(tm, h.engine_socket) as e, ControlClient(h.control_socket) as cc:
        fills = FillServer(e).start()
        e.prefill(toks, session="s")
        n0, before = read_cached_layers(e, toks)
        res = cc.apply([directives.splice("s", start, end, tokens=tau, **rec)])
        assert res.ok, res
        want = (n0 + len(tau) - (end - start)) // PS * PS
        assert e.wait_cached(edited, want, timeout=60) == want
        n1, after = read_cached_layers(e, edited)
        return toks, edited, before[:n0], (n1, after), fills, res, e.paged


def _local(paged, layout, rows, n: int) -> LocalCache:  # type: ignore[no-untyped-def]
    lc = LocalCache(paged, layout, 512)
    lc.put([tuple(b[:n] for b in layer) for layer in rows], range(n))
    return lc


def _same(a, b, positions) -> bool:  # type: ignore[no-untyped-def]
    return all(
        torch.equal(x[positions], y[positions])
        for la, lb in zip(a, b, strict=True)
        for x, y in zip(la, lb, strict=True)
    )


@pytest.fixture
def tm() -> models.TinyModel:
    return models.build("llama3", size="tiny", seed=1)


def test_recompute_everything_is_a_reprefill(kvpilot_host_factory, tm) -> None:  # type: ignore[no-untyped-def]
    h = kvpilot_host_factory(**host_config(PS, sink_tokens=4))
    _, edited, before, (n, after), fills, res, paged = _splice_and_read(
        h, tm, {"recompute_share": 1.0}
    )
    layout = tm.layout(PS)
    # The same pass in private memory: the original rows before the edit,
    # then every position from the edit on recomputed at once.
    ref = _local(paged, layout, before, 37)
    ref.paged.recompute(edited[37:n], list(range(37, n)), ref.arena, ref.seq)
    got = _local(paged, layout, after, n)
    assert _same(got.get(range(n)), ref.get(range(n)), list(range(n)))
    kept = n - 37 - 13
    assert fills.recomputed == kept
    eff = res.results[0].effect
    assert eff.recompute_region == kept and eff.recomputed_tokens == kept


def test_recompute_first_k(kvpilot_host_factory, tm) -> None:  # type: ignore[no-untyped-def]
    h = kvpilot_host_factory(**host_config(PS, sink_tokens=4))
    _, edited, _, (n, after), fills, res, paged = _splice_and_read(h, tm, {"recompute_first": 20})
    _, _, _, (n2, plain), _, _, _ = _splice_and_read(
        kvpilot_host_factory(**host_config(PS, sink_tokens=4)), tm, {}
    )
    assert n == n2
    layout = tm.layout(PS)
    # The replacement and the 20 tokens after it, in one pass over the
    # plain splice's rows; everything after them moved, not recomputed.
    ref = _local(paged, layout, plain, n)
    pos = list(range(37, 37 + 13 + 20))
    ref.paged.recompute([edited[p] for p in pos], pos, ref.arena, ref.seq)
    got = _local(paged, layout, after, n)
    assert _same(got.get(range(n)), ref.get(range(n)), list(range(n)))
    assert res.results[0].effect.recomputed_tokens == 20
    assert fills.recomputed == 0  # the host named them; the engine chose none


def test_guard_reports_what_it_chose(kvpilot_host_factory, tm) -> None:  # type: ignore[no-untyped-def]
    h = kvpilot_host_factory(**host_config(PS, sink_tokens=4))
    _, _, _, (n, _), fills, res, _ = _splice_and_read(h, tm, {"max_kl": 1e-9})
    kept = n - 37 - 13
    # A budget nothing cheaper meets: the guard falls back to all of them.
    assert fills.recomputed == kept and fills.last_estimate == 0.0
    h = kvpilot_host_factory(**host_config(PS, sink_tokens=4))
    _, _, _, (n, _), fills, res, _ = _splice_and_read(h, tm, {"max_kl": 1e9})
    # A budget the plain splice meets: the guard's first block alone.
    assert 0 < fills.recomputed < kept // 4
    assert res.results[0].effect.recompute_region == kept


def test_guard_blocks() -> None:
    """Where the guard measures: its first FRONTIER, then blocks, until half
    the candidates are fresh or no more than FALLBACK_TOKENS are left (the
    guard then recomputes them all); one block at least, unless the share
    asked for is already past half.
    """
    f, left = staleness.FRONTIER, staleness.FALLBACK_TOKENS
    assert staleness.guard_blocks(8) == [8]
    assert staleness.guard_blocks(left + f) == [f]
    assert staleness.guard_blocks(left + f + 1) == [f, 2 * f]
    ends = staleness.guard_blocks(4000)
    assert ends[0] == f and ends[1] - ends[0] == 100  # BLOCK_SHARE of them
    assert ends[-2] <= 2000 < ends[-1]
    assert staleness.guard_blocks(200, start=100) == [116]
    assert staleness.guard_blocks(200, start=180) == []


@pytest.mark.parametrize("quote", [0, 40])
def test_guard_measures_its_frontier_against_a_reprefill(kvpilot_host_factory, tm, quote) -> None:  # type: ignore[no-untyped-def]
    """The guard's estimate is the true staleness of its block's last
    tokens (with the first k fresh they are the re-prefill's rows, and
    their distance from the plain splice's rows is what it measures), times
    the share of the kept tokens still stale, and twice that where those
    tokens echo the removed text (the host marks a quote of it).
    """
    h = kvpilot_host_factory(**host_config(PS, sink_tokens=4))
    _, edited, before, (n, after), fills, _, paged = _splice_and_read(
        h, tm, {"max_kl": 1e9}, quote=quote
    )
    _, _, _, (_, plain), _, _, _ = _splice_and_read(
        kvpilot_host_factory(**host_config(PS, sink_tokens=4)), tm, {}, quote=quote
    )
    kept = n - 37 - 13
    k = staleness.guard_blocks(kept)[0]
    assert fills.recomputed == k  # the engine chose k; the host named none
    layout = tm.layout(PS)
    ref = _local(paged, layout, before, 37)
    ref.paged.recompute(edited[37:n], list(range(37, n)), ref.arena, ref.seq)
    fresh = list(range(37, 50 + k))
    got = _local(paged, layout, after, n).get(fresh)
    want = ref.get(fresh)
    for la, lb in zip(got, want, strict=True):
        for x, y in zip(la, lb, strict=True):
            torch.testing.assert_close(x, y)
    frontier = list(range(50 + k - staleness.FRONTIER, 50 + k))
    stale = _local(paged, layout, plain, n).get(frontier)
    true = staleness.row_deviation(stale, ref.get(frontier)).mean()
    left = (kept - k) / kept
    echo = 1 + staleness.ECHO_WEIGHT if quote else 1.0  # the frontier lies in the quote
    assert fills.last_estimate == pytest.approx(
        staleness.FRONTIER_SCALE * float(true) * left * echo, rel=1e-4
    )


def test_the_defaults_run_the_guard_and_spare_an_engine_that_cannot(  # type: ignore[no-untyped-def]
    kvpilot_host_factory, tm
) -> None:
    """Nothing configured: the torch engine ranks kept tokens, so its
    splices run the quality guard at the default budget; an engine that
    registers no recompute is not refused for the defaults, and the host
    says once what it gets instead.
    """
    h = kvpilot_host_factory(index={"page_size": PS, "sink_tokens": 4})
    _, _, _, (n, _), fills, res, _ = _splice_and_read(h, tm, {})
    kept = n - 37 - 13
    assert 0 < fills.recomputed <= kept
    assert res.results[0].effect.recompute_region == kept
    assert "splices recompute by default" in h.log_path.read_text()
    with EngineClient(h.engine_socket, tm.layout(PS), rope_config(tm.config), engine_id="plain"):
        pass
    assert "recompute none of the tokens they keep" in h.log_path.read_text()


def test_host_refuses_an_engine_that_cannot_recompute(kvpilot_host_factory, tm) -> None:  # type: ignore[no-untyped-def]
    h = kvpilot_host_factory(**{**host_config(PS), "splice": {"recompute": {"first": 32}}})
    layout = tm.layout(PS)
    with pytest.raises(RecomputeUnsupported, match=r"splice\.recompute"):
        EngineClient(h.engine_socket, layout, rope_config(tm.config), engine_id="plain")
    with TorchEngine(tm, h.engine_socket):  # registers recompute: accepted
        pass


def test_directive_recompute_refused_without_engine_support(kvpilot_host_factory, tm) -> None:  # type: ignore[no-untyped-def]
    h = kvpilot_host_factory(**host_config(PS))
    layout = tm.layout(PS)
    toks = tokens(tm.vocab_size, 64, 5)
    with (
        EngineClient(h.engine_socket, layout, rope_config(tm.config), engine_id="plain") as c,
        ControlClient(h.control_socket) as cc,
    ):
        m = c.match(toks, session="s")
        slots = list(m.page_slots) + list(c.allocate(m.request_id, 4).page_slots)
        c.commit(m.request_id, toks, slots[:4])
        c.finish(m.request_id)
        res = cc.apply([directives.splice("s", 10, 20, recompute_first=8)], check=False)
        assert not res.ok
        err = res.results[0].error
        assert err is not None and err.code == "recompute_unsupported"
        assert "did not register recompute" in str(err)
        # Without recompute the same splice is done.
        assert cc.apply([directives.splice("s", 10, 20)]).ok
