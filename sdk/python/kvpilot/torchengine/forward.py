"""The paged forward pass: a transformers model run over a paged KV arena.

``PagedModel.forward`` runs new tokens at consecutive positions through the
model's own modules (embeddings, rotary embedding, per layer its input norm,
attention projections, post-attention norm and MLP or MoE, the final norm
and lm_head). Only attention is the engine's: each layer's queries attend to
the context's rows gathered from the arena (tokens before the new ones, at
their cached positions) and to the new tokens' own rows, causally; the new
rows are written into the arena at the addresses given. Long runs go in
chunks, each attending to the rows the earlier chunks wrote.

``PagedModel.recompute`` is the same pass over chosen positions of a
sequence already in the arena (a splice's replacement and the kept tokens
it recomputes): each token's rows are overwritten at its position, and it
attends to every row up to its own, fresh for the tokens recomputed before
it and as they are for the others.

The decoder layer structure assumed (and checked at construction) is the
pre-norm residual block Llama, Qwen2 and DeepSeek-V3 share.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvpilot.torchengine.attention import Adapter, GQAAdapter, MLAAdapter
from kvpilot.torchengine.models import TinyModel
from kvpilot.torchengine.paging import Rows, TensorSource, gather, gather_before, scatter

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
        every: bool = False,
        logits_from: int = 0,
    ) -> torch.Tensor | None:
        """Runs ``tokens`` at positions ``start, start + 1, ...``.

        ``context`` addresses the rows of the tokens before them (all visible
        to every new token, whatever positions their keys were rotated to);
        ``dest`` where each new token's rows go, or None to write nothing
        (recomputing the last token of a fully cached prompt; at most one
        chunk). Returns the fp32 logits of the last token (of every token
        from the ``logits_from``-th on, ``[len(tokens) - logits_from,
        vocab]``, with ``every``), or None when ``logits`` is False (a fill).
        The vocabulary projection is the largest matmul of a small model, so
        tokens whose logits nobody reads skip it.
        """
        n = len(tokens)
        if dest is None and n > self.chunk:
            raise ValueError(f"{n} tokens without destination rows: at most {self.chunk}")
        if dest is not None and len(dest) != n:
            raise ValueError(f"{n} tokens but {len(dest)} destination rows")
        if n == 0:
            return None
        if every and not 0 <= logits_from < n:
            raise ValueError(f"logits from token {logits_from} of {n}")
        ids = torch.as_tensor(list(tokens), dtype=torch.long)
        h: torch.Tensor | None = None
        hs = []
        done = 0
        while done < n:
            m = min(self.chunk, n - done)
            part, prior = None, Rows.empty()
            if dest is not None:
                part = Rows(dest.slot[done : done + m], dest.row[done : done + m])
                prior = Rows(dest.slot[:done], dest.row[:done])
            h = self._chunk(ids[done : done + m], start + done, arena, context + prior, part)
            if every and logits and done + m > logits_from:
                skip = max(0, logits_from - done)
                hs.append(self.tm.model.lm_head(h[:, skip:])[0].float())
            done += m
        assert h is not None
        if not logits:
            return None
        if every:
            return torch.cat(hs)
        return self.tm.model.lm_head(h[:, -1:])[0, -1].float()

    @torch.no_grad()
    def recompute(
        self,
        tokens: Sequence[int],
        positions: Sequence[int],
        arena: TensorSource,
        seq: Rows,
        *,
        logits: bool = False,
        layers: int | None = None,
    ) -> torch.Tensor | None:
        """Runs ``tokens`` at ``positions`` (strictly increasing) over the
        rows of a sequence: ``seq`` addresses position p at ``seq[p]`` and
        must reach past the last position. In every layer each token's rows
        are written at its position, and it attends to the rows of every
        position up to its own (see the module doc). Returns the fp32 logits
        of every token (``[len(tokens), vocab]``) when ``logits``, else None.

        ``layers`` stops after that many layers (a probe) and returns the
        hidden states entering the next one, ``[1, len(tokens), hidden]``
        (one chunk at most).
        """
        n = len(tokens)
        if n != len(positions):
            raise ValueError(f"{n} tokens but {len(positions)} positions")
        if n == 0:
            return None
        pos = torch.as_tensor(list(positions), dtype=torch.long)
        if bool((pos[1:] <= pos[:-1]).any()) or int(pos[0]) < 0:
            raise ValueError("positions must be non-negative and strictly increasing")
        if int(pos[-1]) >= len(seq):
            raise ValueError(f"position {int(pos[-1])} is past the {len(seq)} rows given")
        if layers is not None and n > self.chunk:
            raise ValueError(f"a probe of {n} tokens: at most {self.chunk}")
        ids = torch.as_tensor(list(tokens), dtype=torch.long)
        out = []
        for done in range(0, n, self.chunk):
            p = pos[done : done + self.chunk]
            last = int(p[-1]) + 1
            ctx = Rows(seq.slot[:last], seq.row[:last])
            dest = Rows(seq.slot[p], seq.row[p])
            mask = torch.arange(last)[None, :] <= p[:, None]
            x = self.inner.embed_tokens(ids[done : done + self.chunk][None])
            cos, sin = self.inner.rotary_emb(x, p[None])
            for i, layer in enumerate(self.inner.layers):
                if layers is not None and i >= layers:
                    return x
                attn = layer.self_attn
                q, rows = self.adapter.project(attn, layer.input_layernorm(x), cos, sin)
                scatter(arena, i, dest, rows)
                past = gather(arena, i, self.nbufs, ctx)
                x = x + self.adapter.attend(attn, q, past, mask)
                x = x + layer.mlp(layer.post_attention_layernorm(x))
            if logits:
                out.append(self.tm.model.lm_head(self.inner.norm(x))[0].float())
        return torch.cat(out) if logits else None

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
                rows = gather_before(arena, i, context, rows)
            x = x + self.adapter.attend(attn, q, rows, mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.inner.norm(x)
