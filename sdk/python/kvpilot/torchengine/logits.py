"""How the logits of two computations of the same prompt are compared.

The engine's paged forward (prefix pages from kvpilot, the rest computed in
chunks) and transformers' own forward over the whole prompt compute the same
function in a different order: attention over pages instead of one
contiguous sequence, matrix products split into other blocks. In fp32 each
reordered sum carries round-off of a few units of 2^-24 relative to its
terms, and a deep model carries it through every layer's residual stream
into the final hidden state; the logits are dot products of that state with
the output embeddings, so their error scales with their magnitude.

So the check is relative to the logits' scale (their largest magnitude),
never absolute: an absolute bound set on tiny random models, whose logits
stay within about 3, does not transfer to a trained model whose logits
reach 30. Measured, fp32, paged forward against transformers, prompts of
230 to 4,096 tokens: ``max |diff| / max |logit|`` is 3e-7 to 1.2e-6 on the
2-layer random models and 1.3e-6 to 1.8e-6 on SmolLM2-135M-Instruct (30
layers; absolute 4e-5 on logits up to 30). ``REL_TOL`` = 1e-5 leaves five
times that and is still about 170 units of fp32 round-off at the logits'
scale: a wrong page, a wrong position or a dropped token moves logits by
1e-2 and more. The greedy token must agree as well, and the KL divergence
is reported (computed in float64: in fp32 it is round-off itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: The largest ``max |got - want| / max |want|`` two fp32 computations of
#: the same logits may differ by (see the module doc).
REL_TOL = 1e-5


@dataclass(frozen=True)
class LogitAgreement:
    """Two logit vectors compared.

    Attributes:
        max_abs: the largest absolute difference.
        scale: the reference's largest magnitude.
        rel: ``max_abs / scale``.
        top1: whether the greedy tokens agree.
        kl: KL(want || got) of the softmax distributions, in float64.
    """

    max_abs: float
    scale: float
    rel: float
    top1: bool
    kl: float

    @property
    def ok(self) -> bool:
        """Whether they are the same logits to fp32 round-off (``REL_TOL``)."""
        return self.rel <= REL_TOL and self.top1

    def worst(self, other: LogitAgreement) -> LogitAgreement:
        """The worse of two comparisons, field by field."""
        return LogitAgreement(
            max_abs=max(self.max_abs, other.max_abs),
            scale=min(self.scale, other.scale),
            rel=max(self.rel, other.rel),
            top1=self.top1 and other.top1,
            kl=max(self.kl, other.kl),
        )


def compare(got: torch.Tensor, want: torch.Tensor) -> LogitAgreement:
    """Compares the last-position logits ``got`` with the reference ``want``."""
    g, w = got.detach().double().flatten(), want.detach().double().flatten()
    max_abs = float((g - w).abs().max())
    scale = float(w.abs().max())
    lw, lg = torch.log_softmax(w, -1), torch.log_softmax(g, -1)
    kl = float((lw.exp() * (lw - lg)).sum())
    return LogitAgreement(
        max_abs=max_abs,
        scale=scale,
        rel=max_abs / scale if scale else max_abs,
        top1=int(g.argmax()) == int(w.argmax()),
        kl=max(kl, 0.0),
    )
