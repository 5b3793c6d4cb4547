"""Scoring an arm against the re-prefill, and adding scores up.

Per scored token: the KL divergence of the arm's next-token distribution
from the re-prefill's, KL(re-prefill ‖ arm), in nats; whether their most
likely tokens agree (top-1); and the arm's negative log-likelihood of the
token the session actually had. Per case: the same for the first token
alone, and the share of the edited region the arm computed.

An arm's figures over a set of cases weigh every scored token equally
(``kl_mean``, ``top1``, ``ppl_ratio``) or every case (``first_top1``);
``kl_max`` is the worst token of all; shares are the arm's tokens over the
regions' tokens, all cases summed (so prefill saved is one minus it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Score:
    """One arm on one case (module doc). ``recomputed`` counts the tokens of
    the edited region whose rows are fresh; ``computed`` every token run
    through the model for it (probes and repeated passes included); ``None``
    when the arm prefills nothing of the edited context (no edit at all).
    """

    tokens: int
    kl_sum: float
    kl_max: float
    top1: int
    first_ok: bool
    nll_sum: float
    ref_nll_sum: float
    region: int
    recomputed: int | None
    computed: int | None

    @property
    def kl_mean(self) -> float:
        """Mean KL per scored token."""
        return self.kl_sum / self.tokens

    @property
    def share(self) -> float:
        """The share of the edited region recomputed (0 for no edit)."""
        return (self.recomputed or 0) / self.region

    def as_dict(self) -> dict[str, Any]:
        """The case's figures as the report lists them."""
        d: dict[str, Any] = {
            "kl_mean": self.kl_sum / self.tokens,
            "kl_max": self.kl_max,
            "top1": self.top1 / self.tokens,
            "first_top1": self.first_ok,
            "ppl_ratio": math.exp((self.nll_sum - self.ref_nll_sum) / self.tokens),
        }
        if self.recomputed is not None:
            d["recomputed_share"] = self.recomputed / self.region
        if self.computed is not None:
            d["compute_share"] = self.computed / self.region
        return d


def score(
    ref: torch.Tensor,
    arm: torch.Tensor,
    continuation: Sequence[int],
    *,
    region: int,
    recomputed: int | None,
    computed: int | None = None,
) -> Score:
    """Scores log-probabilities ``arm`` against ``ref`` (both
    ``[len(continuation), vocab]``, float64).
    """
    kl = (ref.exp() * (ref - arm)).sum(-1).clamp_min(0.0)
    idx = torch.as_tensor(list(continuation))[:, None]
    top_ref, top_arm = ref.argmax(-1), arm.argmax(-1)
    return Score(
        tokens=len(continuation),
        kl_sum=float(kl.sum()),
        kl_max=float(kl.max()),
        top1=int((top_ref == top_arm).sum()),
        first_ok=bool(top_ref[0] == top_arm[0]),
        nll_sum=float(-arm.gather(1, idx).sum()),
        ref_nll_sum=float(-ref.gather(1, idx).sum()),
        region=region,
        recomputed=recomputed,
        computed=recomputed if computed is None else computed,
    )


def summary(scores: Iterable[Score]) -> dict[str, Any]:
    """An arm's figures over cases (module doc)."""
    ss = list(scores)
    n = sum(s.tokens for s in ss)
    region = sum(s.region for s in ss)
    out: dict[str, Any] = {
        "kl_mean": sum(s.kl_sum for s in ss) / n,
        "kl_max": max(s.kl_max for s in ss),
        "top1": sum(s.top1 for s in ss) / n,
        "first_top1": sum(s.first_ok for s in ss) / len(ss),
        "ppl_ratio": math.exp(sum(s.nll_sum - s.ref_nll_sum for s in ss) / n),
        "recomputed_share": None,
        "compute_share": None,
        "cases": len(ss),
        "tokens": n,
    }
    if all(s.recomputed is not None for s in ss):
        out["recomputed_share"] = sum(s.recomputed or 0 for s in ss) / region
        out["compute_share"] = sum(s.computed or 0 for s in ss) / region
    return out
