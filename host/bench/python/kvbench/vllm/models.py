"""The models ``kvpilot bench vllm`` runs: SmolLM2-135M-Instruct (trained,
kvpilot.smollm2) and a small Llama written from a config and seeded random
weights, where saving pages costs the most next to compute.

A random-weight Llama needs no hub and no tokenizer: vLLM runs it with
``skip_tokenizer_init=True`` on token-id prompts. Its weights are scaled so
greedy decoding has clear winners (logits a few units apart), which keeps
token-for-token comparisons between runs meaningful rather than decided by
rounding.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The Llama the bench saves most for: 4 layers, hidden 256 (what made a
#: miss with the connector 2x a miss without it).
SAVE_HEAVY_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}


def write_random_llama(directory: Path, config: Mapping[str, Any], seed: int = 0) -> Path:
    """Writes config.json and model.safetensors of a Llama with seeded
    random weights into directory.
    """
    import torch
    from safetensors.torch import save_file

    c = dict(config)
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    g = torch.Generator().manual_seed(seed)

    def w(rows: int, cols: int, scale: float = 1.0) -> torch.Tensor:
        t = torch.randn(rows, cols, generator=g) * (scale / math.sqrt(cols))
        return t.to(torch.bfloat16)

    tensors = {
        "model.embed_tokens.weight": torch.randn(v, h, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "lm_head.weight": w(v, h, scale=4.0),
    }
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update(
            {
                p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
                p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
                p + "self_attn.q_proj.weight": w(nh * hd, h),
                p + "self_attn.k_proj.weight": w(nkv * hd, h),
                p + "self_attn.v_proj.weight": w(nkv * hd, h),
                p + "self_attn.o_proj.weight": w(h, nh * hd),
                p + "mlp.gate_proj.weight": w(inter, h),
                p + "mlp.up_proj.weight": w(inter, h),
                p + "mlp.down_proj.weight": w(h, inter),
            }
        )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(c, indent=2))
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def vocab_size(model_dir: Path) -> int:
    """The model's vocabulary size, from its config."""
    cfg = json.loads((model_dir / "config.json").read_text())
    return int(cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size"))


#: A DeepSeek-V2 geometry as small as vLLM's CPU MLA kernels take: the
#: latent and RoPE widths they require (kv_lora_rank 512, qk_rope_head_dim
#: 64: 576-element cache rows), two heads, two dense layers (experts
#: declared, none used: first_k_dense_replace covers every layer).
TINY_DEEPSEEK_V2: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 64,
    "v_head_dim": 32,
    "n_routed_experts": 4,
    "first_k_dense_replace": 2,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": 64,
    "max_position_embeddings": 1024,
    "rope_theta": 10000.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}


def write_random_deepseek_v2(
    directory: Path, config: Mapping[str, Any] = TINY_DEEPSEEK_V2, seed: int = 0
) -> Path:
    """Writes a DeepSeek-V2 (MLA) model with seeded random weights into
    directory, through transformers' own class so the tensor names are the
    checkpoint's. Weights are scaled as write_random_llama's (transformers'
    initialisation makes every greedy answer the same token).
    """
    import torch
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    model = DeepseekV2ForCausalLM(DeepseekV2Config(**config))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() != 2:
                p.fill_(1.0)  # the norms
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                scale = 4.0 if name.startswith("lm_head") else 1.0
                p.copy_(torch.randn(p.shape, generator=g) * (scale / math.sqrt(p.shape[1])))
    torch.nn.Module.to(model, torch.bfloat16)  # transformers' typed .to confuses mypy
    model.save_pretrained(str(directory))
    return directory
