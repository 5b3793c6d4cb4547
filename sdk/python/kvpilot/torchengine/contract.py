"""The splice contract, checked against a model's own attention code.

After an amortize splice replaces ``[i, j)`` of a session by τ, the cache
must equal the original prefill with downstream positions re-indexed
(the splice contract). At layer 0 that is exact and checkable: a layer-0 key is a
function of its token and position only, so every downstream layer-0 key
must equal the model's own key for that token at its new position. Deeper
layers mix in the (edited) context; amortize keeps their old values by
design, which is what the first-token agreement measures.

``check_splice`` compares the layer-0 rows read back from the arena after a
splice with:

- the model's own rows for the edited sequence, from transformers' own
  forward pass with a DynamicCache (``layer0_rows``): the key head within
  ``rel_tol`` in relative L2 norm (fp32);
- the exact rotation (float64) of the row stored before the splice by
  Δ = |τ| - (j - i), with the frequencies of the registered RoPE config
  (float64, as the host computes them; they must agree with the model's own
  ``rotary_emb.inv_freq`` to fp32 precision): each rotated element within
  one storage ulp plus fp32 round-off of its pair (the reference engine's
  rule);
- the row stored before the splice: V and the key's non-rotary elements
  bit for bit.

Why relative L2 for the first comparison: transformers forms RoPE angles in
fp32 (``position_ids.float() * inv_freq``), so the model's own key at a
position p carries an angle error of up to half an ulp of p·θ (7.6e-6 rad
for angles in [128, 256)); the key stored at the old position and the
reference at the new one each carry their own, and the highest-frequency
pairs can differ by ~1.5e-5 of their magnitude elementwise while the head
as a whole agrees within ~6e-6. The exact-rotation comparison is the sharp
one: it isolates what the host did.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from kvpilot.layout import Layout, RopeConfig
from kvpilot.torchengine.models import TinyModel
from kvpilot.torchengine.rope import inv_freq64, pair_index, to_storage

#: How far the registered config's frequencies may be from the model's
#: float32 ones (relative): a few float32 roundings.
FREQ_TOL = 1e-6

_MANTISSA = {
    torch.float32: 23,
    torch.bfloat16: 7,
    torch.float16: 10,
    torch.float8_e4m3fn: 3,
    torch.float8_e5m2: 2,
}


@contextmanager
def _first_layer(tm: TinyModel) -> Iterator[None]:
    # transformers' models loop over model.layers: with one left, the
    # forward pass stops after layer 0 (whose cache is all we read).
    inner = tm.model.model
    layers = inner.layers
    inner.layers = nn.ModuleList(list(layers)[:1])
    try:
        yield
    finally:
        inner.layers = layers


@torch.no_grad()
def layer0_rows(
    tm: TinyModel, tokens: Sequence[int], *, first_layer_only: bool = False
) -> tuple[torch.Tensor, ...]:
    """The model's own layer-0 cache rows for ``tokens`` at positions 0..,
    per buffer ``[N, heads, head_dim]`` in the engine's storage form.

    They come from transformers' forward pass (``use_cache=True``): K and V
    of Llama and Qwen2, or DeepSeek-V3's cached ``(kv_c, k_pe)``, whose
    half-split k_pe is rearranged into the declared pairing.
    ``first_layer_only`` runs the forward pass through layer 0 only (the
    same rows, for long prompts).
    """
    ids = torch.as_tensor([list(tokens)], dtype=torch.long)
    if first_layer_only:
        with _first_layer(tm):
            cache = tm.model(ids, use_cache=True).past_key_values.layers[0]
    else:
        cache = tm.model(ids, use_cache=True).past_key_values.layers[0]
    keys, values = cache.keys[0], cache.values[0]
    if tm.attention == "mla":
        # transformers caches the normed latent as keys and k_pe as values.
        row = torch.cat((keys[0], to_storage(values[0], tm.mla_pairing)), dim=-1)
        return (row.unsqueeze(1),)
    return keys.transpose(0, 1).contiguous(), values.transpose(0, 1).contiguous()


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of |x| in ``dtype`` (float64 result)."""
    x = x.double().abs()
    mant = _MANTISSA[dtype]
    tiny = torch.finfo(dtype).tiny
    _, e = torch.frexp(torch.clamp(x, min=tiny))
    return torch.ldexp(torch.ones_like(x), e - 1 - mant)


def rotate_exact(
    slice_: torch.Tensor, delta: int, inv_freq: torch.Tensor, pairing: str
) -> torch.Tensor:
    """``slice_`` (``[..., dim]``) rotated by ``delta`` positions in float64
    with unscaled cos/sin (the rotation rule kvpilot's splice applies).
    """
    x = slice_.double().clone()
    a, b = pair_index(x.shape[-1], pairing)
    ang = float(delta) * inv_freq.double()
    c, s = torch.cos(ang), torch.sin(ang)
    xa, xb = x[..., a], x[..., b]
    x[..., a] = xa * c - xb * s
    x[..., b] = xa * s + xb * c
    return x


def angle_allowance(
    key: torch.Tensor,
    off: int,
    dim: int,
    pairing: str,
    inv32: torch.Tensor,
    inv64: torch.Tensor,
    p: int | torch.Tensor,
    q: int | torch.Tensor,
) -> torch.Tensor:
    """Per head of ``key`` (``[heads, head_dim]``), the relative L2 distance
    transformers' fp32 RoPE angles can put between the key of one token at
    position p and its rotation from position q by the host. Keys of
    several tokens (``[tokens, heads, head_dim]``) take p and q as
    ``[tokens]`` tensors and give ``[tokens, heads]``.

    transformers forms each angle as ``float32(position) * inv_freq`` in
    fp32 with float32 frequencies: an error of up to half an ulp of the
    angle at each position, plus a few ulps of 1 for cos, sin and the
    attention factor; the host rotates by (p - q)·θ with float64 θ, which
    differs by |p - q|·|θ64 - θ32|. A pair of norm r moves by r times the
    angle error.
    """
    # Positions as float32, as transformers forms them: [tokens, 1, 1]
    # against key's [tokens, heads, pairs] (or scalars against [heads, pairs]).
    pt = torch.as_tensor(p, dtype=torch.float32)
    qt = torch.as_tensor(q, dtype=torch.float32)
    if pt.dim():
        pt, qt = pt[:, None, None], qt[:, None, None]
    half_ulp = 0.5 * (ulp(pt * inv32, torch.float32) + ulp(qt * inv32, torch.float32))
    eps = half_ulp + (pt.double() - qt.double()).abs() * (inv64 - inv32.double()).abs()
    eps = eps + 4 * 2.0**-24
    a, b = pair_index(dim, pairing)
    rope_part = key[..., off : off + dim].double()
    pair_norm = torch.hypot(rope_part[..., a], rope_part[..., b])
    return (pair_norm * eps).norm(dim=-1) / key.double().norm(dim=-1)


@dataclass
class SpliceCheck:
    """What ``check_splice`` found.

    Attributes:
        downstream_rows: downstream rows checked (positions after τ).
        filled_rows: τ's rows checked (written by the fill order).
        prefix_rows: rows before the edit checked bit for bit.
        max_rel_model: the largest relative L2 distance of a key head from
            the model's own key at its position (downstream and τ).
        max_rel_model_elem: the same elementwise, relative to the head's
            largest element (reported, not gated).
        max_rotation_err: the largest distance of a rotated element from
            the exact rotation of the stored element, in units of its
            tolerance (<= 1 passes).
        max_rotation_ulps: the same in storage ulps of the exact element.
        max_angle_allowance: the largest widening of the model tolerance
            for fp32 angle rounding (``angle_rounding`` only).
        moved_bits_equal: V and the non-rotary key elements of downstream
            rows, and every row before the edit, are unchanged bit for bit.
        failures: descriptions of the first failing rows.
        ok: everything passed.
    """

    downstream_rows: int = 0
    filled_rows: int = 0
    prefix_rows: int = 0
    max_rel_model: float = 0.0
    max_rel_model_elem: float = 0.0
    max_rotation_err: float = 0.0
    max_rotation_ulps: float = 0.0
    max_angle_allowance: float = 0.0
    freq_rel_err: float = 0.0
    moved_bits_equal: bool = True
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """All checks passed (and there was something downstream to check)."""
        return not self.failures and self.downstream_rows > 0


def _fail(chk: SpliceCheck, msg: str) -> None:
    if len(chk.failures) < 8:
        chk.failures.append(msg)


def check_splice(
    tm: TinyModel,
    layout: Layout,
    rope_cfg: RopeConfig,
    *,
    before: tuple[torch.Tensor, ...],
    after: tuple[torch.Tensor, ...],
    edited: Sequence[int],
    start: int,
    end: int,
    replacement: Sequence[int],
    rel_tol: float = 1e-5,
    angle_rounding: bool = False,
    first_layer_only: bool = False,
) -> SpliceCheck:
    """Checks layer-0 rows after a splice of ``[start, end)`` by
    ``replacement`` (see the module doc).

    ``rope_cfg`` is the RoPE config the engine registered. ``before`` are
    the cached rows (per buffer) of the original sequence,
    ``after`` those of the ``edited`` sequence, each from position 0; only
    positions both cover are compared. ``rel_tol`` gates the distance to the
    model's own keys in fp32 (a bf16 cache is gated by its ulp against the
    exact rotation only). ``angle_rounding`` widens it, per key head, by
    the bound of transformers' own fp32 angle rounding at the stored and the
    new position (``angle_allowance``); long prompts need it, since that
    rounding grows with the position. ``first_layer_only`` computes the
    model's rows with a forward pass through layer 0 only.
    """
    rope = layout.rope
    assert rope is not None, "a splice needs a RoPE slice"
    kbuf, off, dim = rope.buffer, rope.offset, rope.dim
    delta = len(replacement) - (end - start)
    inv32 = tm.model.model.rotary_emb.inv_freq.detach().float()
    inv = inv_freq64(rope_cfg, dim)
    dtype = after[kbuf].dtype
    fp32 = dtype == torch.float32
    model = layer0_rows(tm, edited, first_layer_only=first_layer_only)
    chk = SpliceCheck()
    chk.freq_rel_err = float(((inv - inv32.double()).abs() / inv).max())
    if not chk.freq_rel_err <= FREQ_TOL:
        _fail(chk, f"registered RoPE frequencies are {chk.freq_rel_err:.3g} from the model's")
    n_after = after[kbuf].shape[0]
    n_before = before[kbuf].shape[0]

    # Rows before the edit: untouched. Every check below runs on all the
    # positions of its kind at once (a long prompt has thousands).
    m = min(start, n_after, n_before)
    chk.prefix_rows = max(m, 0)
    changed = [
        (p, buf)
        for buf in range(len(after))
        for p in _rows_differ(after[buf][:m], before[buf][:m]).nonzero().flatten().tolist()
    ]
    for p, buf in sorted(changed):
        chk.moved_bits_equal = False
        _fail(chk, f"position {p} (before the edit) buffer {buf} changed")

    def against_model(ps: torch.Tensor, stored_at: torch.Tensor, what: str) -> None:
        if not len(ps):
            return
        got, want = after[kbuf][ps].double(), model[kbuf][ps].double()
        rel_heads = (got - want).norm(dim=-1) / want.norm(dim=-1)
        tol = torch.full_like(rel_heads, rel_tol)
        moved = stored_at != ps
        if angle_rounding and bool(moved.any()):
            allow = angle_allowance(
                want[moved], off, dim, rope.style, inv32, inv, ps[moved], stored_at[moved]
            )
            chk.max_angle_allowance = max(chk.max_angle_allowance, float(allow.max()))
            tol[moved] = tol[moved] + allow
        rel = rel_heads.amax(dim=-1)
        elem = ((got - want).abs().amax(-1) / want.abs().amax(-1)).amax(-1)
        chk.max_rel_model = max(chk.max_rel_model, float(rel.max()))
        chk.max_rel_model_elem = max(chk.max_rel_model_elem, float(elem.max()))
        if not fp32:
            return
        for k in (~(rel_heads <= tol).all(dim=-1)).nonzero().flatten().tolist():
            _fail(
                chk,
                f"{what} position {int(ps[k])}: key {float(rel[k]):.3g} from the model's own "
                f"(tol {float(tol[k].max()):.3g})",
            )

    # τ's rows, written by the engine's fill.
    filled = _span(start, min(start + len(replacement), n_after))
    chk.filled_rows = len(filled)
    against_model(filled, filled, "replacement")

    # Downstream rows: moved by Δ, as far as the rows before reach.
    ps = _span(start + len(replacement), min(n_after, n_before + delta))
    chk.downstream_rows = len(ps)
    if len(ps):
        olds = ps - delta
        against_model(ps, olds, "downstream")
        got_k, old_k = after[kbuf][ps], before[kbuf][olds]
        rot = slice(off, off + dim)
        exact = rotate_exact(old_k[..., rot], delta, inv, rope.style)
        got = got_k[..., rot].double()
        a, b = pair_index(dim, rope.style)
        norm = torch.zeros_like(exact)
        pn = torch.hypot(exact[..., a], exact[..., b])
        norm[..., a], norm[..., b] = pn, pn
        tol = 16 * ulp(norm, torch.float32) + ulp(exact, dtype)
        err = (got - exact).abs()
        worst = (err / tol).flatten(1).amax(dim=1)
        chk.max_rotation_err = max(chk.max_rotation_err, float(worst.max()))
        chk.max_rotation_ulps = max(chk.max_rotation_ulps, float((err / ulp(exact, dtype)).max()))
        for k in (~(worst <= 1.0)).nonzero().flatten().tolist():
            _fail(
                chk,
                f"downstream position {int(ps[k])} (was {int(olds[k])}): rotation "
                f"{float(worst[k]):.3g}x its tolerance",
            )
        keep = torch.ones(got_k.shape[-1], dtype=torch.bool)
        keep[rot] = False
        differ = _rows_differ(got_k[..., keep], old_k[..., keep])
        for bb in range(len(after)):
            if bb != kbuf:
                differ |= _rows_differ(after[bb][ps], before[bb][olds])
        for k in differ.nonzero().flatten().tolist():
            chk.moved_bits_equal = False
            _fail(
                chk,
                f"downstream position {int(ps[k])} (was {int(olds[k])}): V or non-rotary K changed",
            )
    if chk.downstream_rows == 0:
        _fail(chk, "no downstream rows to check")
    return chk


def _span(a: int, b: int) -> torch.Tensor:
    """Positions ``[a, b)``, none when b <= a."""
    return torch.arange(a, max(a, b))


def _rows_differ(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per leading row, whether ``x`` and ``y`` differ anywhere (NaN differs,
    as torch.equal has it).
    """
    return (x != y).flatten(1).any(dim=1) if x.shape[0] else torch.zeros(0, dtype=torch.bool)


def agreement(pairs: Sequence[tuple[int, int]]) -> float:
    """The share of (amortized, re-prefilled) first tokens that agree."""
    if not pairs:
        return math.nan
    return sum(a == b for a, b in pairs) / len(pairs)
