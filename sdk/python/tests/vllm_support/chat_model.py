"""The tiny Llama with a tokenizer and a chat template, so vLLM's OpenAI
server can serve it: one token per byte (a byte-level BPE with no merges,
259 ids within the model's 512) and a minimal template. Only the front
door's test uses it; the connector's own tests run token ids offline.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from vllm_support.tiny_model import write_tiny_llama

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{{ m['content'] if m['content'] is string else '' }}\n{% endfor %}<|assistant|>"
)


def write_chat_llama(directory: Path) -> Path:
    """Writes the tiny Llama and its byte tokenizer into directory."""
    write_tiny_llama(directory)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = TEMPLATE
    fast.save_pretrained(directory)
    return directory
