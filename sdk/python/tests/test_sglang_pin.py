"""What SGLang reverted, through kvpilot: a pin with a TTL and refresh-on-hit.

SGLang merged ``pin_prefix`` with a TTL and reverted it; kvpilot's pins hold
the pages SGLang wrote to its L3 tier. The pin comes as Dynamo's router
sends it after a request (``cache_control`` ``pin_prefix`` with the
request's tokens and TTL, on the Control socket); SGLang's prefetch then
finds the pinned pages however much other traffic went through, across a
restart of the kvpilot host, and each hit refreshes the pin.

The SGLang workers here are fresh caches in this process (tests/
sglang_worker.py's Worker): the producer's, then, after the flood and the
restart, a consumer's that never saw the pages. Run by ``make
test-sglang``; skipped without SGLang.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here: make test-sglang runs this")

import sglang_worker
from sglang_support import seq

from kvpilot import ControlClient, EngineClient, Layout

PAGE = 16
MODEL = "sglang-pin-test"
GEOMETRY = {"page_size": PAGE, "layers": 2, "heads": 2, "head_dim": 8, "kv_size": 512}
# The layout the SGLang workers register (kvpilot.sglang.pages): the flood
# engine below registers the same one, as another worker of the model.
LAYOUT = Layout.mha(
    MODEL, page_size=PAGE, dtype="bf16", layers=2, kv_heads=2, head_dim=8, rope_dim=0
)
# Longer than the flood, the restart and a worker's attach take (~1 s here),
# and the hit comes HIT_AT_S after the pin: so the pin, refreshed by the hit,
# expires at HIT_AT_S + TTL_S, well after the TTL_S it was taken with.
TTL_S = 12.0
HIT_AT_S = 6.0


def _flood(host: Any, pages: int, base: int) -> None:
    """Another engine of the model fills the host tier with other pages."""
    with EngineClient(
        host.engine_socket, LAYOUT, engine_id="flood", mode="connector", timeout=30
    ) as c:
        for i in range(pages // 2):
            tokens = list(range(base + 100 * i, base + 100 * i + 2 * PAGE))
            m = c.match(tokens)
            a = c.allocate(m.request_id, 2 - len(m.page_slots))
            c.commit(m.request_id, tokens, m.page_slots + a.page_slots)
            c.release(m.request_id)


def _cached_pages(host: Any, tokens: list[int]) -> int:
    with EngineClient(
        host.engine_socket, LAYOUT, engine_id="probe", mode="connector", timeout=30
    ) as c:
        m = c.match(tokens)
        c.release(m.request_id)
        return m.cached_tokens // PAGE


def _pins(host: Any) -> int:
    """Pins the host holds (records: they outlive the memory tiers)."""
    with ControlClient(host.control_socket) as ctl:
        return ctl.stats().pins


def test_pin_survives_flood_and_restart_refreshes_on_hit_and_expires(
    kvpilot_host_factory: Any,
) -> None:
    host = kvpilot_host_factory(
        index={"sweep_interval": "200ms"},
        tiers={
            "device": {"capacity_pages": 16},
            "host": {"capacity_pages": 24},
            "disk": {"capacity_pages": 24},
        },
    )
    spec = {"socket": host.engine_socket, **GEOMETRY, "extra": {"model": MODEL}}
    vip = seq("vip", 1000, 3, PAGE)
    other = seq("other", 5000, 3, PAGE)
    with sglang_worker.Worker(spec) as producer:
        producer.produce(vip)
        producer.produce(other)
    assert _cached_pages(host, vip["tokens"]) == 3
    assert _cached_pages(host, other["tokens"]) == 3

    # Dynamo's router pins the request's prefix after it finished.
    with ControlClient(host.control_socket) as ctl:
        r = ctl.cache_control("pin_prefix", token_ids=vip["tokens"], ttl_seconds=TTL_S)
    assert r.ok and r.count == 3, r
    pinned_at = time.monotonic()

    # Other pages, three times the host tier (and the disk tier, where
    # pinned pages persist); then a restart, which empties the memory tiers.
    _flood(host, 72, 100_000)
    host.restart()
    assert _pins(host) == 1

    # A fresh SGLang worker finds the pinned prefix (byte for byte); the
    # unpinned one went with the flood.
    time.sleep(max(0.0, pinned_at + HIT_AT_S - time.monotonic()))
    before = time.monotonic()
    with sglang_worker.Worker({**spec, "layout": "layer_first"}) as consumer:
        assert consumer.consume(vip) == {"hit_pages": 3, "wrong_bytes": 0}
        assert consumer.consume(other)["hit_pages"] == 0
    after = time.monotonic()
    # The hit fell within the first pin's TTL, so it refreshed it.
    assert after - pinned_at < TTL_S

    # The pin expires TTL after the last hit: not before the worker started,
    # and soon after it ended (the sweep runs every 200 ms).
    while _pins(host) and time.monotonic() < after + TTL_S + 10:
        time.sleep(0.5)
    expired = time.monotonic()
    assert _pins(host) == 0
    assert before + TTL_S <= expired, "the pin expired before TTL after the hit"
    assert expired > pinned_at + TTL_S + HIT_AT_S / 2, "the hit did not refresh the pin"
    # Stats stop counting a pin at its expiry; its pages are unpinned at the
    # next sweep (200 ms; later on a loaded machine).
    with ControlClient(host.control_socket) as ctl:
        deadline = time.monotonic() + 10
        while any(t.pinned_pages for t in ctl.stats().tiers.values()):
            assert time.monotonic() < deadline, ctl.stats().tiers
            time.sleep(0.1)
