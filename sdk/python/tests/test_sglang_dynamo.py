"""Pages an SGLang worker wrote to kvpilot reach Dynamo's router as kvpilot's.

An SGLang worker (SGLang's own cache and controller in a process of
its own: tests/sglang_worker.py) writes pages to its L3 tier, the kvpilot backend.
kvpilot computes its block identity from the tokens behind SGLang's page
keys, so the host's Dynamo events carry kvpilot's sequence hashes and
Dynamo's own tokens hashes, and Dynamo's RadixTree (the indexer the router
keeps per storage tier) scores the SGLang worker for the prefix it wrote.
Dynamo's router then pins that prefix through the worker's cache_control
endpoint, and kvpilot pins the pages the SGLang worker wrote.

Needs ai-dynamo-runtime in this interpreter and a Python with SGLang for the
worker; skipped without either (make test-sglang has both).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import Any

import pytest

dynamo_core = pytest.importorskip(
    "dynamo._core", reason="ai-dynamo-runtime is not installed (pip install ai-dynamo-runtime)"
)

from dynamo_wire import (  # noqa: E402
    NatsSubscriber,
    cache_control_endpoint,
    msgpack_decoder,
    router_events,
)
from ports import free_port  # noqa: E402
from sglang_support import run_worker, seq, sglang_python  # noqa: E402

DECODE = msgpack_decoder()
pytestmark = [
    pytest.mark.skipif(sglang_python() is None, reason="no Python with SGLang: make test-sglang"),
    pytest.mark.skipif(
        DECODE is None,
        reason="no MessagePack decoder: pip install msgspec (make py-env installs it)",
    ),
]

PAGE = 16
NS, COMPONENT, ENDPOINT = "kvpsgl", "backend", "generate"
SUBJECT = f"namespace.{NS}.component.{COMPONENT}.endpoint.{ENDPOINT}.kv-events"
WORKER = 0x5A6B7C8D9E
GEOMETRY = {"page_size": PAGE, "layers": 2, "heads": 2, "head_dim": 8, "kv_size": 512}


def _kvpilot_hashes(binary: str, tokens: list[int], namespace: str = "") -> dict[str, list[int]]:
    args = [binary, "hash", "--block-size", str(PAGE)]
    if namespace:
        args += ["--namespace", namespace]
    out = subprocess.run(args + [str(t) for t in tokens], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _stored(events: list[dict[str, Any]], tier: str) -> list[dict[str, Any]]:
    return [
        b
        for e in events
        if e["storage_tier"] == tier
        and isinstance(e["event"]["data"], dict)
        and "stored" in e["event"]["data"]
        for b in e["event"]["data"]["stored"]["blocks"]
    ]


def test_sglang_pages_score_the_worker_in_dynamo(kvpilot_host_factory: Any, tmp_path: Any) -> None:
    port = free_port()
    host = kvpilot_host_factory(
        worker_id=WORKER,
        nats={"listen": f"127.0.0.1:{port}"},
        events={"format": "dynamo", "namespace": NS, "component": COMPONENT, "endpoint": ENDPOINT},
    )
    sub = NatsSubscriber(port, SUBJECT)
    a = seq("a", 7000, 4, PAGE)
    b = {"name": "b", "tokens": a["tokens"][: 2 * PAGE] + list(range(9000, 9000 + 2 * PAGE))}
    salted = seq("salted", 11_000, 2, PAGE, cache_salt="acme")
    try:
        run_worker(
            {
                "socket": host.engine_socket,
                **GEOMETRY,
                "stages": [{"role": "produce", "seqs": [a, b, salted]}],
            }
        )
        # Dynamo's router keeps one RadixTree per storage tier; the pages
        # kvpilot holds for SGLang are announced on its host tier.
        tree = dynamo_core.RadixTree()
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + 20
        while len(_stored(events, "host_pinned")) < 8:
            msg = sub.next(deadline)
            assert msg is not None, f"timed out; events so far: {events}"
            _, data = msg
            for ev in router_events(data, DECODE)[1]:
                events.append(ev)
                if ev["storage_tier"] == "host_pinned":
                    tree.apply_event(ev["worker_id"], json.dumps(ev["event"]).encode())
    finally:
        sub.close()

    assert {e["worker_id"] for e in events} == {WORKER}
    assert _stored(events, "device") == [], "the staging tier is never announced"
    blocks = _stored(events, "host_pinned")
    want_a = _kvpilot_hashes(host.binary, a["tokens"])
    want_b = _kvpilot_hashes(host.binary, b["tokens"])
    local_a = dynamo_core.compute_block_hash_for_seq(a["tokens"], PAGE)
    local_b = dynamo_core.compute_block_hash_for_seq(b["tokens"], PAGE)
    assert want_a["local"] == local_a
    # a's four pages, then b's two pages after the two it shares with a.
    assert [x["block_hash"] for x in blocks[:6]] == want_a["sequence"] + want_b["sequence"][2:]
    assert [x["tokens_hash"] for x in blocks[:6]] == local_a + local_b[2:]

    assert tree.find_matches(local_a).scores == {(WORKER, 0): 4}
    assert tree.find_matches(local_b).scores == {(WORKER, 0): 4}
    # The salted request's pages are tenant "acme"'s, hashed in its
    # namespace: an unsalted lookup of the same tokens does not find them.
    want_s = _kvpilot_hashes(host.binary, salted["tokens"], namespace="acme")
    assert [x["block_hash"] for x in blocks[6:8]] == want_s["sequence"]
    plain = dynamo_core.compute_block_hash_for_seq(salted["tokens"], PAGE)
    assert tree.find_matches(plain).scores == {}

    # Dynamo's router pins the prefix of a request SGLang served through the
    # worker's cache_control endpoint (kvpilot.dynamo's handler, served in a
    # real Dynamo runtime): the pages the SGLang worker wrote are pinned in
    # kvpilot's tiers, and unpinned the same way.
    pinned, held, unpinned = _pin_through_dynamo(host, tmp_path, a["tokens"])
    assert pinned["status"] == "ok" and pinned["pinned_count"] == 4, pinned
    assert held >= 4
    assert unpinned["status"] == "ok" and unpinned["unpinned_count"] == 4, unpinned


def _pin_through_dynamo(
    host: Any, tmp_path: Any, tokens: list[int]
) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """pin_prefix of ``tokens`` through the worker's cache_control endpoint,
    the pinned pages kvpilot then holds, and unpin_prefix the same way.
    """
    from kvpilot import ControlClient

    path = f"{NS}.{COMPONENT}.cache_control"

    async def run() -> tuple[dict[str, Any], int, dict[str, Any]]:
        async with cache_control_endpoint(
            host.control_socket, path, PAGE, str(tmp_path / "dynamo-kv")
        ) as ask:
            pinned = await ask({"action": "pin_prefix", "token_ids": tokens, "ttl_seconds": 300})
            with ControlClient(host.control_socket) as ctl:
                held = sum(t.pinned_pages for t in ctl.stats().tiers.values())
            unpinned = await ask({"action": "unpin_prefix", "token_ids": tokens})
            return pinned, held, unpinned

    return asyncio.run(run())
