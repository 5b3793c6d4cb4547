"""What became of the pages the worker was handed to save, by reason.

Every page vLLM's scheduler plans to save ends as committed (new to
kvpilot, or one it had), skipped (never sent to the host) or failed (the
host refused it, or the call failed). A page not saved is a future cache
miss, so none may go unseen: each is counted under its reason, in vLLM's
own connector stats (kvpilot.vllm.stats: ``skipped_pages.<reason>``,
``failed_pages.<code>``) and in the log.

The log stays readable under load: the first page lost for each reason is
logged at once (with the request and the host's message), and after that a
summary line at most every ``interval_s``, with the pages lost since the
previous one by reason and the totals since start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: Why a save was skipped (never sent to the host).
QUEUE_FULL = "queue_full"  # save_queue_pages pages were already waiting
STAGING_FULL = "staging_full"  # kvpilot's staging tier had no free slot
HOST_AWAY = "host_away"  # the host is unreachable; the connector backs off
HOST_RESTARTED = "host_restarted"  # planned for a registration that ended
AFTER_GAP = "after_gap"  # an earlier save of the request was lost
PREEMPTED = "preempted"  # vLLM preempted the request and freed its blocks
BAD_PLAN = "bad_plan"  # the scheduler's plan did not fit the worker's record

#: The reasons a skip is named by; a failure is named by the host's error
#: code (invalid_slot, unknown_request, unavailable, ...) or "internal".
SKIP_REASONS = (QUEUE_FULL, STAGING_FULL, HOST_AWAY, HOST_RESTARTED, AFTER_GAP, PREEMPTED, BAD_PLAN)


@dataclass
class SaveCounters:
    """Pages since start: copied to staging, committed (new to kvpilot),
    skipped and failed, the last two also by reason.
    """

    copied: int = 0
    committed: int = 0
    skipped: int = 0
    failed: int = 0
    #: ("skipped" or "failed", reason) -> pages.
    lost: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **kw: int) -> None:
        """Adds to the named counters (thread-safe)."""
        with self._lock:
            for k, n in kw.items():
                setattr(self, k, getattr(self, k) + n)

    def lose(self, kind: str, reason: str, pages: int) -> None:
        """Counts pages skipped or failed for reason."""
        with self._lock:
            setattr(self, kind, getattr(self, kind) + pages)
            self.lost[(kind, reason)] = self.lost.get((kind, reason), 0) + pages

    def as_dict(self) -> dict[str, int]:
        """The counters by name: the totals, then ``skipped_pages.<reason>``
        and ``failed_pages.<code>``.
        """
        with self._lock:
            out = {
                "copied_pages": self.copied,
                "committed_pages": self.committed,
                "skipped_pages": self.skipped,
                "failed_pages": self.failed,
            }
            for (kind, reason), n in sorted(self.lost.items()):
                out[f"{kind}_pages.{reason}"] = n
            return out


class LossLog:
    """Logs lost saves: each reason's first at once, then a summary at most
    every interval_s.
    """

    def __init__(
        self,
        counters: SaveCounters,
        log: logging.Logger,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counters = counters
        self.log = log
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str]] = set()
        self._pending: dict[tuple[str, str], int] = {}
        self._last = clock()

    def lost(self, kind: str, reason: str, pages: int, req_id: str, detail: str = "") -> None:
        """Counts pages of req_id skipped or failed for reason, and logs it
        (the first of its reason now, later ones in the next summary).
        """
        if pages <= 0:
            return
        self.counters.lose(kind, reason, pages)
        key = (kind, reason)
        with self._lock:
            first = key not in self._seen
            self._seen.add(key)
            if not first:
                self._pending[key] = self._pending.get(key, 0) + pages
        if first:
            # A failure's detail is the host's error, which starts with its code.
            why = (
                detail if kind == "failed" and detail else ": ".join(filter(None, (reason, detail)))
            )
            self.log.warning(
                "kvpilot connector (worker): %s %d pages of request %s%s (%s); they stay a "
                "kvpilot miss. Later losses are summed up every %.0f s",
                "skipped saving" if kind == "skipped" else "saving",
                pages,
                req_id,
                "" if kind == "skipped" else " failed",
                why,
                self.interval_s,
            )
        self.flush()

    def flush(self) -> None:
        """Logs the summary when interval_s has passed since the last one and
        pages were lost since.
        """
        now = self._clock()
        with self._lock:
            if not self._pending or now - self._last < self.interval_s:
                return
            pending, self._pending = self._pending, {}
            since, self._last = now - self._last, now
        totals = self.counters.as_dict()
        self.log.warning(
            "kvpilot connector (worker): %d pages not saved in the last %.0f s (%s); since "
            "start: %d skipped, %d failed, %d committed",
            sum(pending.values()),
            since,
            _by_reason(pending),
            totals["skipped_pages"],
            totals["failed_pages"],
            totals["committed_pages"],
        )


def _by_reason(pending: dict[tuple[str, str], int]) -> str:
    parts = []
    for kind in ("skipped", "failed"):
        items = sorted((r, n) for (k, r), n in pending.items() if k == kind)
        if items:
            parts.append(f"{kind}: " + ", ".join(f"{r} {n}" for r, n in items))
    return "; ".join(parts)
