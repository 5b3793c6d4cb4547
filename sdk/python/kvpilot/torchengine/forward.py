"""The paged forward pass: a transformers model run over a paged KV arena.

``PagedModel.forward`` runs new tokens at consecutive positions through the
model's own modules (embeddings, rotary embedding, per layer its input norm,
attention projections, post-attention norm and MLP or MoE, the final norm
and lm_head). Only attention is the engine's: each layer's queries attend to
the context's rows gathered from the arena (tokens before the new ones, at
their cached positions) and to the new tokens' own rows, causally; the new
rows are written into the arena at the addresses given. Long runs go in
chunks, each attending to the rows the earlier chunks wrote.

The decoder layer structure assumed (and checked at construction) is the
pre-norm residual block Llama, Qwen2 and DeepSeek-V3 share.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvpilot.torchengine.attention import Adapter, GQAAdapter, MLAAdapter
from kvpilot.torchengine.models import TinyModel
from kvpilot.torchengine.paging import Rows, TensorSource, gather, scatter

#: Tokens per chunk of a long prefill.
DEFAULT_CHUNK = 2048


class PagedModel:
    """A TinyModel's forward pass over a paged arena (see the module doc)."""

    def __init__(self, tm: TinyModel, *, chunk: int = DEFAULT_CHUNK) -> None:
        self.tm = tm
        self.inner = tm.model.model
        self.chunk = chunk
        self.adapter: Adapter = (
            MLAAdapter(tm.mla_pairing) if tm.attention == "mla" else GQAAdapter()
        )
        self.nbufs = 1 if tm.attention == "mla" else 2
        for i, layer in enumerate(self.inner.layers):
            for part in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp"):
                if not hasattr(layer, part):
                    raise TypeError(f"layer {i} of {tm.name} has no {part}: not a pre-norm block")

    @property
    def layers(self) -> int:
        """Decoder layers."""
        return len(self.inner.layers)

    @torch.no_grad()
    def forward(
        self,
        tokens: Sequence[int],
        start: int,
        arena: TensorSource,
        context: Rows,
        dest: Rows | None,
        *,
        logits: bool = True,
    ) -> torch.Tensor | None:
        """Runs ``tokens`` at positions ``start, start + 1, ...``.

        ``context`` addresses the rows of the tokens before them (positions
        ``0 .. len(context) - 1``, all visible to every new token); ``dest``
        where each new token's rows go, or None to write nothing (recomputing
        the last token of a fully cached prompt; at most one chunk). Returns
        the fp32 logits of the last token, or None when ``logits`` is False
        (a fill).
        """
        n = len(tokens)
        if dest is None and n > self.chunk:
            raise ValueError(f"{n} tokens without destination rows: at most {self.chunk}")
        if dest is not None and len(dest) != n:
            raise ValueError(f"{n} tokens but {len(dest)} destination rows")
        if n == 0:
            return None
        ids = torch.as_tensor(list(tokens), dtype=torch.long)
        h: torch.Tensor | None = None
        done = 0
        while done < n:
            m = min(self.chunk, n - done)
            part, prior = None, Rows.empty()
            if dest is not None:
                part = Rows(dest.slot[done : done + m], dest.row[done : done + m])
                prior = Rows(dest.slot[:done], dest.row[:done])
            h = self._chunk(ids[done : done + m], start + done, arena, context + prior, part)
            done += m
        assert h is not None
        if not logits:
            return None
        return self.tm.model.lm_head(h[:, -1:])[0, -1].float()

    def _chunk(
        self, ids: torch.Tensor, start: int, arena: TensorSource, context: Rows, dest: Rows | None
    ) -> torch.Tensor:
        t, c = ids.numel(), len(context)
        x = self.inner.embed_tokens(ids[None])
        pos = torch.arange(start, start + t, dtype=torch.long)[None]
        cos, sin = self.inner.rotary_emb(x, pos)
        mask = torch.ones(t, c + t, dtype=torch.bool)
        mask[:, c:] = torch.ones(t, t, dtype=torch.bool).tril()
        for i, layer in enumerate(self.inner.layers):
            attn = layer.self_attn
            q, rows = self.adapter.project(attn, layer.input_layernorm(x), cos, sin)
            if dest is not None:
                scatter(arena, i, dest, rows)
            if c:
                past = gather(arena, i, self.nbufs, context)
                rows = tuple(torch.cat((p.to(r.dtype), r)) for p, r in zip(past, rows, strict=True))
            x = x + self.adapter.attend(attn, q, rows, mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.inner.norm(x)
