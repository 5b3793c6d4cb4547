"""The connector's counters in vLLM's own connector stats.

vLLM collects ``get_kv_connector_stats()`` from each worker every step and
logs the reduced sums with its periodic stats ("KV Transfer metrics"), so
an operator sees the pages kvpilot loaded into vLLM and what became of the
pages it was handed to save: copied to staging, committed (new to kvpilot),
skipped or failed, and those two by reason (``skipped_pages.queue_full``,
``failed_pages.invalid_slot``, ...: kvpilot.vllm.losses), present once a
page was lost to that reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

#: The counters, in the order vLLM's log shows them.
FIELDS = ("loaded_pages", "copied_pages", "committed_pages", "skipped_pages", "failed_pages")


@dataclass
class KvpilotStats(KVConnectorStats):
    """Counter deltas since the worker's last report, summed across workers."""

    def __post_init__(self) -> None:
        for f in FIELDS:
            self.data.setdefault(f, 0)

    def reset(self) -> None:
        self.data = dict.fromkeys(FIELDS, 0)

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for f, n in other.data.items():
            self.data[f] = self.data.get(f, 0) + int(n)
        return self

    def reduce(self) -> dict[str, int | float]:
        return {f: int(n) for f, n in self.data.items() if f in FIELDS or n}

    def is_empty(self) -> bool:
        return not any(self.data.values())


class StatsDelta:
    """Turns running totals into the deltas vLLM wants per report."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def take(self, totals: dict[str, Any]) -> KvpilotStats | None:
        now = {f: int(n) for f, n in totals.items()}
        delta = {f: n - self._last.get(f, 0) for f, n in now.items()}
        self._last = now
        stats = KvpilotStats(data={f: n for f, n in delta.items() if f in FIELDS or n})
        return None if stats.is_empty() else stats
