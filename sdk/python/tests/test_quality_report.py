"""The splice-quality report's curves, on made-up scores (no model).

``first_best`` is the bound the guard is judged against: per case the stop
on its path (the splice, a block, the fallback) that a known price per
recomputed token makes cheapest. It must pick the stop a hand calculation
picks, span "nothing recomputed" to "everything", and lie on or below the
guard's curve wherever both are defined.
"""

from __future__ import annotations

from kvbench import qualityreport as q
from kvbench.editcases import Case
from kvbench.qualityscore import Score

TOKENS = 10
REGION = 100


def score(kl_sum: float, recomputed: int) -> Score:
    return Score(tokens=TOKENS, kl_sum=kl_sum, kl_max=kl_sum, top1=TOKENS, first_ok=True,
                 nll_sum=0.0, ref_nll_sum=0.0, region=REGION, recomputed=recomputed,
                 computed=recomputed)  # fmt: skip


def result(name: str, splice: float, path: list[tuple[int, float, float]]) -> q.CaseResult:
    """A case whose splice leaves ``splice`` nats summed and whose guard
    path is (recomputed, summed KL, estimate) per block.
    """
    c = Case(name, "truncate", original=[], edited=[], edits=[], continuation=[0] * TOKENS)
    r = q.CaseResult(case=c, region=REGION, candidates=90, fallback_computed=REGION)
    r.arms = {"splice": score(splice, 10), "control": score(0.0, REGION)}
    r.trajectory = [q.Step(k=rec - 10, score=score(kl, rec), estimate=e) for rec, kl, e in path]
    return r


CASES = [
    # The guard's estimate misjudges this one: it stops at 20 where 40 is
    # worth its price.
    result("a", 1.0, [(20, 0.6, 0.001), (40, 0.1, 0.0005)]),
    result("b", 0.3, [(20, 0.29, 0.02), (40, 0.28, 0.01)]),
]


def test_best_stops_price_each_stop() -> None:
    # A price of 0.01 nats per token: a's block to 40 saves 0.5 for 0.2 (take
    # it), b's blocks save 0.01 and 0.02 for 0.1 and 0.3 (stay spliced).
    a, b = q.best_stops(CASES, 0.01)
    assert (a.recomputed, b.recomputed) == (40, 10)
    # Free recompute: every kept token; prohibitive: the splice alone.
    assert [s.recomputed for s in q.best_stops(CASES, 0.0)] == [REGION, REGION]
    assert [s.recomputed for s in q.best_stops(CASES, 1e3)] == [10, 10]


def test_first_best_bounds_the_guard() -> None:
    cv = q.curves(CASES, deviation=[])
    best = cv["first_best"]
    shares = [p["recomputed_share"] for p in best]
    assert shares == sorted(shares) and shares[0] == 0.1 and shares[-1] == 1.0
    assert len({(p["recomputed_share"], p["kl_mean"]) for p in best}) == len(best)
    for p in cv["guard"]:
        bound = q.at_share(best, p["recomputed_share"])
        assert bound is not None and bound <= p["kl_mean"] + 1e-12, p


def test_guard_curve_is_every_budget() -> None:
    # Every estimate lies between BUDGETS' 0.015 and 0.0125: those two stop
    # both cases at 20 and both at 40. At 0.0131, a's first estimate, a
    # stops at 20 and b goes on to 40: a point only the whole curve has.
    cases = [
        result("a", 1.0, [(20, 0.6, 0.0131), (40, 0.1, 0.0112)]),
        result("b", 0.3, [(20, 0.29, 0.0137), (40, 0.28, 0.0111)]),
    ]
    cv = q.curves(cases, deviation=[])["guard"]
    pts = {(round(p["recomputed_share"], 6), round(p["kl_mean"], 9)): p["point"] for p in cv}
    assert len(pts) == len(cv)
    assert pts[(0.3, round((0.6 + 0.28) / (2 * TOKENS), 9))] == "max_kl=0.0131"
    assert pts[(0.2, round((0.6 + 0.29) / (2 * TOKENS), 9))] == "max_kl=0.05"
