"""The tests' tiny Llama: seeded random weights (kvbench.vllm.models),
2 layers, hidden 128, so a vLLM process starts fast.
"""

from __future__ import annotations

from pathlib import Path

from kvbench.vllm.models import SAVE_HEAVY_LLAMA, write_random_llama

#: The bench's Llama made smaller: 2 layers, hidden 128, head_dim 32, 2 KV
#: heads (GQA).
CONFIG = {
    **SAVE_HEAVY_LLAMA,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "head_dim": 32,
    "max_position_embeddings": 1024,
}


def write_tiny_llama(directory: Path, seed: int = 0) -> Path:
    """Writes config.json and model.safetensors into directory."""
    return write_random_llama(directory, CONFIG, seed)
