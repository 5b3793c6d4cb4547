"""Paged attention over a model's own attention modules.

Each adapter splits one layer's attention in two around the cache:

- ``project``: from the layer's normed hidden states of the new tokens and
  their rotary ``(cos, sin)``, the queries and the cache rows of the new
  tokens, one tensor per KV buffer ``[tokens, heads, head_dim]`` in the
  layout's storage form. Projections, norms and the rotary function are the
  model's own (the module-level ``apply_rotary_pos_emb`` of the attention
  class's modeling file), so the cached keys are the model's keys.
- ``attend``: the layer's attention output for those queries over cache rows
  (the context's rows, gathered from the arena, followed by the new ones),
  with a mask that lets each query see its own and earlier positions.

Attention itself is torch's scaled_dot_product_attention with the module's
own ``scaling``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn import functional as F

from kvpilot.torchengine.rope import from_storage, to_storage

RotaryFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]

# A layer's attention module as transformers defines it (LlamaAttention,
# DeepseekV3Attention, ...). Its projections, head sizes and config are plain
# attributes, which nn.Module's __getattr__ types as Tensor | Module; each
# model family has its own set, so they are read as the model defines them.
AttentionModule = Any


def model_function(module: nn.Module, name: str) -> Any:
    """A function of the modeling file that defines ``module``'s class
    (e.g. its ``apply_rotary_pos_emb``).
    """
    return getattr(sys.modules[type(module).__module__], name)


class Adapter(Protocol):
    """One attention family's split around the cache (see the module doc)."""

    def project(
        self, attn: AttentionModule, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[Any, tuple[torch.Tensor, ...]]:
        """Queries and the new tokens' cache rows, one per buffer."""
        ...

    def attend(
        self, attn: AttentionModule, q: Any, rows: tuple[torch.Tensor, ...], mask: torch.Tensor
    ) -> torch.Tensor:
        """The attention output ``[1, tokens, hidden]`` (o_proj applied)."""
        ...


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    # q [1, heads, T, d]; k, v [1, kv_heads, N, d] (kv_heads divides heads:
    # each K/V head serves a group of query heads, without copies of it);
    # mask [T, N], True = attend.
    gqa = k.shape[1] != q.shape[1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


class GQAAdapter:
    """Llama and Qwen2 attention: K and V buffers of ``kv_heads x head_dim``,
    the whole key head rotated half-split.
    """

    def project(
        self, attn: AttentionModule, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Queries ``[1, heads, T, d]``; rows (k, v) of ``[T, kv_heads, d]``."""
        t = h.shape[1]
        hd = attn.head_dim
        q = attn.q_proj(h).view(1, t, -1, hd).transpose(1, 2)
        k = attn.k_proj(h).view(1, t, -1, hd).transpose(1, 2)
        v = attn.v_proj(h).view(1, t, -1, hd)
        q, k = model_function(attn, "apply_rotary_pos_emb")(q, k, cos, sin)
        return q, (k.transpose(1, 2)[0], v[0])

    def attend(
        self,
        attn: AttentionModule,
        q: torch.Tensor,
        rows: tuple[torch.Tensor, ...],
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Grouped-query attention over the rows; o_proj applied."""
        k, v = rows
        k = k.transpose(0, 1).unsqueeze(0)
        v = v.transpose(0, 1).unsqueeze(0)
        out = _sdpa(q, k.to(q.dtype), v.to(q.dtype), mask, attn.scaling)
        t = q.shape[2]
        return attn.o_proj(out.transpose(1, 2).reshape(1, t, -1))


class MLAAdapter:
    """DeepSeek-V3 multi-head latent attention: one row per token,
    ``[kv_c | k_pe]``, where kv_c is the normed compressed latent and k_pe
    the rotated shared key, stored in ``pairing``.
    """

    def __init__(self, pairing: str) -> None:
        self.pairing = pairing

    def project(
        self, attn: AttentionModule, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor]]:
        """Queries ``(q_pass, q_rot)``; the row ``[T, 1, rank + rope_dim]``."""
        t = h.shape[1]
        if attn.q_lora_rank is None:
            q = attn.q_proj(h)
        else:
            q = attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(h)))
        q = q.view(1, t, -1, attn.qk_head_dim).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [attn.qk_nope_head_dim, attn.qk_rope_head_dim], dim=-1)
        kv = attn.kv_a_proj_with_mqa(h)
        kv_c, k_rot = torch.split(kv, [attn.kv_lora_rank, attn.qk_rope_head_dim], dim=-1)
        kv_c = attn.kv_a_layernorm(kv_c)
        k_rot = k_rot.view(1, 1, t, attn.qk_rope_head_dim)
        if attn.config.rope_interleave:
            rotate = model_function(attn, "apply_rotary_pos_emb_interleave")
        else:
            rotate = model_function(attn, "apply_rotary_pos_emb")
        q_rot, k_rot = rotate(q_rot, k_rot, cos, sin)
        row = torch.cat((kv_c[0], to_storage(k_rot[0, 0], self.pairing)), dim=-1)
        return (q_pass, q_rot), (row.unsqueeze(1),)

    def attend(
        self,
        attn: AttentionModule,
        q: tuple[torch.Tensor, torch.Tensor],
        rows: tuple[torch.Tensor, ...],
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Expands the latents with the model's own ``expand_kv`` (kv_b_proj)
        and attends; o_proj applied.
        """
        q_pass, q_rot = q
        (row,) = rows
        n = row.shape[0]
        row = row[:, 0].to(q_pass.dtype)
        kv_c = row[:, : attn.kv_lora_rank].view(1, 1, n, attn.kv_lora_rank)
        k_rot = from_storage(row[:, attn.kv_lora_rank :], self.pairing)
        keys, values = attn.expand_kv(kv_c, k_rot.reshape(1, 1, n, attn.qk_rope_head_dim))
        query = torch.cat((q_pass, q_rot), dim=-1)
        out = _sdpa(query, keys, values, mask, attn.scaling)
        t = query.shape[2]
        return attn.o_proj(out.transpose(1, 2).reshape(1, t, -1))
