"""kvpilot.torchengine: a paged-attention engine on transformers models.

It runs tiny Hugging Face models (seeded random weights, nothing
downloaded) with a kvpilot host as their KV store, in arena mode: the
engine registers its layout and RoPE config, maps the host's device arena
(a memfd) zero-copy and computes attention over the K/V pages in it. It
exists to prove kvpilot's contracts against real models' own code: prefix
reuse gives the model's logits, and a splice leaves every downstream
layer-0 key equal to the model's own key at its new position.

Modules, one concern each:

- ``models``: the tiny models (Llama llama3 and linear, Qwen2 YaRN,
  DeepSeek-V3 MLA with either k_pe pairing) and their KV layouts;
- ``rope``: a model's RoPE config in kvpilot's terms, k_pe pairings;
- ``paging``: row addresses in a paged arena, gather and scatter;
- ``attention``: per family, the model's attention split around the cache;
- ``forward``: the paged forward pass;
- ``engine``: ``TorchEngine``, requests through the engine protocol;
- ``fills``: ``FillServer``, the engine's side of splice fill orders;
- ``contract``: the splice contract checked against the model's own keys.

The benchmark that drives it (``kvpilot bench real-model``) and the
scenarios it shares with the tests live outside the package, in
``host/bench/python/kvbench``.

It needs torch and transformers (the ``torch`` extra).
"""

from kvpilot.torchengine.engine import PrefillResult, TorchEngine
from kvpilot.torchengine.fills import FillServer
from kvpilot.torchengine.models import MODELS, TinyModel, build

__all__ = ["MODELS", "FillServer", "PrefillResult", "TinyModel", "TorchEngine", "build"]
