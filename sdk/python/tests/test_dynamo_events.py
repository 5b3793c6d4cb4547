"""Dynamo's own code consumes kvpilot: block hashes, KV events and scores.

Needs ai-dynamo-runtime (``dynamo._core``) and a MessagePack decoder
(msgspec, an ai-dynamo dependency, or msgpack); skipped without them.

What is Dynamo's here: ``compute_block_hash_for_seq`` (the router's block
hash), ``RadixTree`` (the router's indexer: ``apply_event`` deserializes a
KvCacheEvent with Dynamo's own serde types, and ``find_matches`` scores
workers per (worker_id, dp_rank) from local block hashes), and, in
``test_envelope_matches_dynamo_publisher``, a real ``KvEventPublisher``
whose message kvpilot's must match key for key. The envelope's MessagePack
is decoded here with a generic decoder: ai-dynamo 1.6.1 exposes no Python
binding for its event-plane decoder.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

dynamo_core = pytest.importorskip(
    "dynamo._core", reason="ai-dynamo-runtime is not installed (pip install ai-dynamo-runtime)"
)

from dynamo_wire import NatsSubscriber, msgpack_decoder, router_events  # noqa: E402
from ports import free_port  # noqa: E402

from kvpilot import ControlClient, EngineClient, Layout  # noqa: E402

DECODE = msgpack_decoder()
needs_msgpack = pytest.mark.skipif(
    DECODE is None, reason="no MessagePack decoder: pip install msgspec (an ai-dynamo dependency)"
)

PAGE = 16
LAYOUT = Layout.mha("dyn-test", page_size=PAGE, dtype="fp16", layers=1, kv_heads=1, head_dim=8)
NS, COMPONENT, ENDPOINT = "kvp", "backend", "generate"
SUBJECT = f"namespace.{NS}.component.{COMPONENT}.endpoint.{ENDPOINT}.kv-events"


def commit_prefix(c: EngineClient, tokens: list[int], session: str) -> list[int]:
    m = c.match(tokens, session=session)
    a = c.allocate(m.request_id, len(tokens) // PAGE - len(m.page_slots))
    r = c.commit(m.request_id, tokens, m.page_slots + a.page_slots)
    c.finish(m.request_id)
    return r.block_hashes


# --- hashes ---------------------------------------------------------------


def _kvpilot_hash(binary: str, tokens: list[int], bs: int, lora: str) -> dict[str, list[int]]:
    args = [binary, "hash", "--block-size", str(bs)]
    if lora:
        args += ["--lora", lora]
    out = subprocess.run(
        args + [str(t) for t in tokens], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize("block_size", [16, 32, 64])
def test_block_hashes_equal_dynamo(kvpilot_binary: str, block_size: int) -> None:
    """1,000 random sequences per block size, half with a LoRA name: Dynamo's
    compute_block_hash_for_seq equals `kvpilot hash`'s local hashes."""
    rng = random.Random(block_size)
    cases = []
    for i in range(1000):
        n = rng.randrange(0, 6 * block_size)  # partial pages are not hashed
        tokens = [
            rng.randrange(0, 2**32) if i % 7 == 0 else rng.randrange(0, 200_000) for _ in range(n)
        ]
        lora = f"adapter-{rng.randrange(1000)}" if i % 2 else ""
        cases.append((tokens, lora))
    with ThreadPoolExecutor(4) as pool:
        mine = list(
            pool.map(lambda c: _kvpilot_hash(kvpilot_binary, c[0], block_size, c[1]), cases)
        )
    for (tokens, lora), got in zip(cases, mine, strict=True):
        want = dynamo_core.compute_block_hash_for_seq(tokens, block_size, lora_name=lora or None)
        assert got["local"] == want, (len(tokens), lora)
        assert got["sequence"][:1] == want[:1]  # a first page's sequence hash is its local hash


# --- events into Dynamo's indexer ------------------------------------------


class EventFeed:
    """Reads one host's published envelopes and feeds its device-tier
    events to a Dynamo RadixTree, as the router's primary indexer does
    (other tiers go to the router's lower-tier indexers)."""

    def __init__(self, port: int, tree: Any) -> None:
        self.sub = NatsSubscriber(port, SUBJECT)
        self.tree = tree
        self.envelopes: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def drain(self, until: Any, timeout: float = 10.0) -> None:
        """Applies messages until until(events) holds."""
        deadline = time.monotonic() + timeout
        while not until(self.events):
            msg = self.sub.next(deadline)
            assert msg is not None, f"timed out; events so far: {self.events}"
            subject, data = msg
            assert subject == SUBJECT
            env, evs = router_events(data, DECODE)
            self.envelopes.append(env)
            for ev in evs:
                self.events.append(ev)
                if ev["storage_tier"] == "device":
                    self.tree.apply_event(ev["worker_id"], json.dumps(ev["event"]).encode())

    def close(self) -> None:
        self.sub.close()


def _removed(evs: list[dict[str, Any]]) -> int:
    return sum(
        len(e["event"]["data"]["removed"]["block_hashes"])
        for e in evs
        if e["storage_tier"] == "device"
        and isinstance(e["event"]["data"], dict)
        and "removed" in e["event"]["data"]
    )


def _stored_device(evs: list[dict[str, Any]]) -> int:
    return sum(
        len(e["event"]["data"]["stored"]["blocks"])
        for e in evs
        if e["storage_tier"] == "device"
        and isinstance(e["event"]["data"], dict)
        and "stored" in e["event"]["data"]
    )


def _dynamo_host(factory: Any, worker_id: int, dp_rank: int) -> tuple[Any, int]:
    port = free_port()
    h = factory(
        worker_id=worker_id,
        nats={"listen": f"127.0.0.1:{port}"},
        events={
            "format": "dynamo",
            "namespace": NS,
            "component": COMPONENT,
            "endpoint": ENDPOINT,
            "dp_rank": dp_rank,
        },
    )
    return h, port


@needs_msgpack
def test_two_hosts_scored_by_dynamo_indexer(kvpilot_host_factory: Any) -> None:
    """Two hosts (two Dynamo worker ids) publish in Dynamo's format; their
    events, applied to Dynamo's RadixTree, score each worker with the
    prefix it holds; after a prune on one host its score drops."""
    wa, wb = 0x9D74316BD2523, 0x1B2C3D4E5F6
    ha, pa = _dynamo_host(kvpilot_host_factory, wa, 0)
    hb, pb = _dynamo_host(kvpilot_host_factory, wb, 1)
    tree = dynamo_core.RadixTree()
    fa, fb = EventFeed(pa, tree), EventFeed(pb, tree)
    shared = list(range(5000, 5000 + 2 * PAGE))
    prompt = shared + list(range(7000, 7000 + 2 * PAGE))  # 4 pages
    other = shared + list(range(9000, 9000 + 2 * PAGE))
    local = dynamo_core.compute_block_hash_for_seq(prompt, PAGE)
    try:
        with (
            EngineClient(ha.engine_socket, LAYOUT) as ca,
            EngineClient(hb.engine_socket, LAYOUT) as cb,
        ):
            seq_a = commit_prefix(ca, prompt, "a")
            commit_prefix(cb, other, "b")
            fa.drain(lambda evs: _stored_device(evs) >= 4)
            fb.drain(lambda evs: _stored_device(evs) >= 4)

            # The events are Dynamo's: stamped with each worker's identity,
            # block_hash the host's sequence hash, tokens_hash Dynamo's.
            stored = [
                e
                for e in fa.events
                if e["storage_tier"] == "device" and "stored" in e["event"]["data"]
            ]
            blocks = [b for e in stored for b in e["event"]["data"]["stored"]["blocks"]]
            assert [b["block_hash"] for b in blocks] == seq_a
            assert [b["tokens_hash"] for b in blocks] == local
            assert {e["worker_id"] for e in fa.events} == {wa}
            assert {e["event"]["dp_rank"] for e in fb.events} == {1}
            ids = [e["event"]["event_id"] for e in fa.events]
            assert ids == list(range(1, len(ids) + 1))
            seqs = [env["sequence"] for env in fa.envelopes]
            assert seqs == list(range(len(seqs)))
            assert all(env["topic"] == "kv-events" for env in fa.envelopes)
            assert len({env["publisher_id"] for env in fa.envelopes}) == 1

            scores = tree.find_matches(local).scores
            assert scores == {(wa, 0): 4, (wb, 1): 2}, scores

            # Prune host A after the first page: its score drops to 1.
            with ControlClient(ha.control_socket) as ctl:
                r = ctl.cache_control("evict_descendants", block_hashes=[seq_a[0]])
                assert r.ok and r.count >= 3, r
            fa.drain(lambda evs: _removed(evs) >= 3)
            scores = tree.find_matches(local).scores
            assert scores == {(wa, 0): 1, (wb, 1): 2}, scores
    finally:
        fa.close()
        fb.close()


@needs_msgpack
def test_envelope_matches_dynamo_publisher(kvpilot_host_factory: Any, tmp_path: Any) -> None:
    """A real Dynamo KvEventPublisher (event plane on the host's NATS)
    and kvpilot publish the same two blocks on the same subject; the two
    messages decode to the same keys, nesting and value types."""
    wid = 4242
    h, port = _dynamo_host(kvpilot_host_factory, wid, 0)
    sub = NatsSubscriber(port, SUBJECT)
    tokens = list(range(300, 300 + 2 * PAGE))
    os.environ["NATS_SERVER"] = f"nats://127.0.0.1:{port}"
    os.environ["DYN_FILE_KV"] = str(tmp_path / "dynamo-kv")
    try:
        with EngineClient(h.engine_socket, LAYOUT) as c:
            seq = commit_prefix(c, tokens, "ref")
        deadline = time.monotonic() + 10
        mine = None
        while mine is None:
            msg = sub.next(deadline)
            assert msg is not None, "kvpilot published nothing"
            env, evs = router_events(msg[1], DECODE)
            dev = [
                e for e in evs if e["storage_tier"] == "device" and "stored" in e["event"]["data"]
            ]
            if dev:
                mine = (env, dev[0])
        # kvpilot goes on with the host tier's write-through events (each
        # with a parent hash), later under load: read them all before Dynamo
        # publishes, so none is taken for Dynamo's.
        quiet_until = time.monotonic() + 10
        while sub.next(min(time.monotonic() + 1.5, quiet_until)) is not None:
            pass

        async def publish() -> None:
            rt = dynamo_core.DistributedRuntime(
                asyncio.get_running_loop(), "file", "tcp", event_plane="nats"
            )
            ep = rt.endpoint(f"{NS}.{COMPONENT}.{ENDPOINT}")
            pub = dynamo_core.KvEventPublisher(ep, worker_id=wid, kv_block_size=PAGE, dp_rank=0)
            await asyncio.sleep(0.5)
            # The binding takes block hashes as signed 64-bit integers.
            signed = [h - 2**64 if h >= 2**63 else h for h in seq]
            pub.publish_stored(tokens, [PAGE, PAGE], signed, parent_hash=None)
            await asyncio.sleep(1.0)
            pub.shutdown()
            rt.shutdown()

        asyncio.run(publish())
        theirs_blocks: list[dict[str, Any]] = []
        theirs = None
        deadline = time.monotonic() + 10
        while len(theirs_blocks) < 2:  # Dynamo may split a store
            msg = sub.next(deadline)
            assert msg is not None, "Dynamo's publisher published nothing on " + SUBJECT
            env, evs = router_events(msg[1], DECODE)
            theirs = theirs or (env, evs[0])
            theirs_blocks += [b for e in evs for b in e["event"]["data"]["stored"]["blocks"]]
    finally:
        sub.close()
        os.environ.pop("NATS_SERVER", None)
        os.environ.pop("DYN_FILE_KV", None)

    def shape(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: shape(x) for k, x in v.items()}
        if isinstance(v, list):
            return [shape(x) for x in v[:1]]
        return type(v).__name__

    assert list(mine[0]) == list(theirs[0])  # envelope keys, in order
    assert shape(mine[0]) == shape(theirs[0])
    assert shape(mine[1]) == shape(theirs[1])
    # The same blocks with the same hashes.
    assert mine[1]["event"]["data"]["stored"]["blocks"] == theirs_blocks
    assert mine[1]["worker_id"] == theirs[1]["worker_id"] == wid
