"""A model's rotary embedding in kvpilot's terms, and k_pe storage pairings.

``rope_config`` turns a transformers config's ``rope_parameters`` into the
RopeConfig the engine registers, so that the host rotates cached keys with
the same frequencies the model used: base, scaling type and factor,
llama3's band factors, YaRN's betas, mscales and attention factor.

The k_pe pairing. transformers' DeepSeek-V3 (``modeling_deepseek_v3.py``)
rotates k_pe with ``apply_rotary_pos_emb_interleave`` when the config's
``rope_interleave`` is true (the default) and with ``apply_rotary_pos_emb``
(``rotate_half``) otherwise. The first reads its input in interleaved pairs
``(2i, 2i+1)`` but writes its output de-interleaved, ``cat(evens, odds)``;
the second is half-split on both sides. Either way the k_pe it caches pairs
``(i, i + d/2)``: half_split. DeepSeek-V2-style caches (vLLM, SGLang) keep
k_pe interleaved instead. ``to_storage`` and ``from_storage`` convert
between transformers' half-split k_pe and the pairing the engine declared.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kvpilot.layout import RopeConfig, RopeScaling


def _params(config: Any) -> dict[str, Any]:
    p = getattr(config, "rope_parameters", None) or {}
    if "rope_theta" not in p and hasattr(config, "rope_theta"):
        p = {**p, "rope_theta": config.rope_theta}
    return dict(p)


def rope_config(config: Any) -> RopeConfig:
    """The RopeConfig of a transformers config (``rope_parameters``).

    Only the fields the scaling type uses are set (the host refuses others).
    ``rope_type`` must be default, linear, llama3 or yarn.
    """
    p = _params(config)
    kind = p.get("rope_type") or p.get("type") or "default"
    base = float(p["rope_theta"])
    if kind == "default":
        return RopeConfig(base=base)
    factor = float(p["factor"])
    if kind == "linear":
        return RopeConfig(base=base, scaling=RopeScaling(type="linear", factor=factor))
    orig = int(p["original_max_position_embeddings"])
    if kind == "llama3":
        return RopeConfig(
            base=base,
            scaling=RopeScaling(
                type="llama3",
                factor=factor,
                original_max_position=orig,
                low_freq_factor=float(p["low_freq_factor"]),
                high_freq_factor=float(p["high_freq_factor"]),
            ),
        )
    if kind == "yarn":
        return RopeConfig(
            base=base,
            scaling=RopeScaling(
                type="yarn",
                factor=factor,
                original_max_position=orig,
                beta_fast=float(p.get("beta_fast") or 0.0),
                beta_slow=float(p.get("beta_slow") or 0.0),
                mscale=float(p.get("mscale") or 0.0),
                mscale_all_dim=float(p.get("mscale_all_dim") or 0.0),
                attention_factor=float(p.get("attention_factor") or 0.0),
                no_truncate=not p.get("truncate", True),
            ),
        )
    raise ValueError(f"rope_type {kind!r}: kvpilot rotates default, linear, llama3 and yarn")


def inv_freq64(rope: RopeConfig, dim: int) -> torch.Tensor:
    """The per-pair inverse frequencies θ_i of ``rope`` in float64, as the
    host computes them from the registered config (kernels/rope): the same
    formulas transformers evaluates in float32.
    """
    i = torch.arange(0, dim, 2, dtype=torch.float64)
    inv = 1.0 / (rope.base ** (i / dim))
    s = rope.scaling
    if s.type == "linear":
        return inv / s.factor
    if s.type == "llama3":
        orig = float(s.original_max_position)
        low_wl, high_wl = orig / s.low_freq_factor, orig / s.high_freq_factor
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
        mid = (1 - smooth) * inv / s.factor + smooth * inv
        out = torch.where(wavelen > low_wl, inv / s.factor, mid)
        return torch.where(wavelen < high_wl, inv, out)
    if s.type == "yarn":
        fast, slow = s.beta_fast or 32.0, s.beta_slow or 1.0
        orig = float(s.original_max_position)

        def correction(rotations: float) -> float:
            return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(rope.base))

        low, high = correction(fast), correction(slow)
        if not s.no_truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0.0), min(high, dim - 1.0)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extrapolate = 1 - ramp
        return (inv / s.factor) * (1 - extrapolate) + inv * extrapolate
    return inv


def to_storage(k_pe: torch.Tensor, pairing: str) -> torch.Tensor:
    """Rearranges transformers' half-split k_pe (last dim) into ``pairing``.

    Interleaved storage puts element i at 2i and element i + d/2 at 2i + 1,
    so each rotated pair sits side by side.
    """
    if pairing == "half_split":
        return k_pe
    half = k_pe.shape[-1] // 2
    return torch.stack((k_pe[..., :half], k_pe[..., half:]), dim=-1).flatten(-2)


def from_storage(k_pe: torch.Tensor, pairing: str) -> torch.Tensor:
    """The inverse of ``to_storage``: stored k_pe back to half-split."""
    if pairing == "half_split":
        return k_pe
    return torch.cat((k_pe[..., 0::2], k_pe[..., 1::2]), dim=-1)


def pair_index(dim: int, pairing: str) -> tuple[list[int], list[int]]:
    """The element indices ``(a, b)`` of each rotated pair of a slice."""
    half = dim // 2
    if pairing == "interleaved":
        return [2 * i for i in range(half)], [2 * i + 1 for i in range(half)]
    return list(range(half)), [i + half for i in range(half)]
