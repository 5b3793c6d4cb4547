"""Pin, pause and warm reach an SGLang worker's pages through NATS.

The Control socket (tests test_sglang_pin, test_sglang_units) is one door;
routers also send directives as JSON on the host's NATS command subject,
``kv-control-<worker_id>``, on the host's embedded nats-server: Dynamo's
``cache_control`` (``pin_prefix`` with the request's tokens) and kvpilot's
own commands (``Pause``, ``Warm`` by block hash). Both act on the pages an
SGLang worker (SGLang's own cache and controller in this process, tests/
sglang_worker.py) wrote to its L3 tier, and a fresh SGLang worker's
prefetch finds them where the directives left them.

Run by ``make test-sglang``; skipped without SGLang.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here: make test-sglang runs this")

import sglang_worker
from dynamo_wire import NatsSubscriber
from ports import free_port
from sglang_support import seq

from kvpilot import ControlClient

PAGE = 16
WORKER = 4242
GEOMETRY = {"page_size": PAGE, "layers": 2, "heads": 2, "head_dim": 8, "kv_size": 512}


def _hashes(binary: str, tokens: list[int]) -> list[int]:
    out = subprocess.run(
        [binary, "hash", "--block-size", str(PAGE), *map(str, tokens)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)["sequence"]


def _send(port: int, command: dict[str, Any]) -> dict[str, Any]:
    """One command on this worker's NATS subject; the host's JSON reply."""
    inbox = f"_INBOX.sglang-test.{time.monotonic_ns()}"
    nc = NatsSubscriber(port, inbox)
    try:
        reply = nc.request(
            f"kv-control-{WORKER}", json.dumps(command).encode(), time.monotonic() + 20
        )
    finally:
        nc.close()
    assert reply is not None, f"no reply to {command}"
    return json.loads(reply)


def test_nats_pin_pause_and_warm_reach_sglang_pages(kvpilot_host_factory: Any) -> None:
    port = free_port()
    host = kvpilot_host_factory(worker_id=WORKER, nats={"listen": f"127.0.0.1:{port}"})
    spec = {"socket": host.engine_socket, **GEOMETRY}
    vip = seq("vip", 40_000, 3, PAGE)
    paused = seq("paused", 42_000, 3, PAGE)
    with sglang_worker.Worker(spec) as producer:
        producer.produce(vip)
        producer.produce(paused)

    # Dynamo's router pins the request's prefix, as it sends it over NATS.
    r = _send(port, {"action": "pin_prefix", "token_ids": vip["tokens"], "ttl_seconds": 600})
    assert r["status"] == "ok" and r["pinned_count"] == 3, r
    # A router pauses a session it parked under a lease.
    want = _hashes(host.binary, paused["tokens"])
    r = _send(
        port,
        {
            "type": "Pause",
            "block_hashes": [str(h) for h in want],
            "ttl_seconds": 600,
            "lease_id": "sglang-nats",
        },
    )
    assert r["status"] == "ok" and r["results"][0]["effect"]["blocks"] == 3, r
    with ControlClient(host.control_socket) as ctl:
        deadline = time.monotonic() + 20  # the mover copies to disk behind the reply
        while ctl.stats().tiers["disk"].leased_pages < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        s = ctl.stats()
        assert s.pins == 1 and s.tiers["disk"].leased_pages == 3, s

    with sglang_worker.Worker({**spec, "layout": "layer_first"}) as consumer:
        assert consumer.consume(vip) == {"hit_pages": 3, "wrong_bytes": 0}
        assert consumer.consume(paused) == {"hit_pages": 3, "wrong_bytes": 0}

    r = _send(port, {"type": "Warm", "block_keys": [str(h) for h in want], "target_tier": "host"})
    assert r["status"] == "ok", r
    with ControlClient(host.control_socket) as ctl:
        assert ctl.stats().tiers["host"].pages >= 3
