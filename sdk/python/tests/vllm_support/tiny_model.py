"""The tests' tiny Llama: seeded random weights (kvbench.vllm.models),
2 layers, hidden 128, so a vLLM process starts fast.
"""

from __future__ import annotations

from pathlib import Path

from kvbench.vllm.models import write_random_llama

#: The model's geometry; head_dim 32 and 2 KV heads (GQA).
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}


def write_tiny_llama(directory: Path, seed: int = 0) -> Path:
    """Writes config.json and model.safetensors into directory."""
    return write_random_llama(directory, CONFIG, seed)
