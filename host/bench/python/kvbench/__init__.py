"""kvbench: the Python sides of kvpilot's benchmarks.

Benchmark drivers, not SDK: they live beside the Go harnesses that run them
(``host/bench``) and are not installed with the ``kvpilot`` package. The Go
side starts a host and runs a module here with this folder on
``PYTHONPATH``; the Python tests put it on their path too
(``sdk/python/pyproject.toml``).

- ``realmodel``: ``kvpilot bench real-model``, a transformers model on this
  CPU with kvpilot as its KV store (``python -m kvbench.realmodel``);
- ``scenario``: splice scenarios shared by that benchmark and the tests;
- ``vllm``: ``kvpilot bench vllm``, vLLM's CPU build with and without the
  kvpilot connector (``python -m kvbench.vllm``), and the random-weight
  Llama the vLLM tests run;
- ``traces``: prompts from the repository's agent traces.
"""
