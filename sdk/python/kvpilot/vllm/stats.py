"""The connector's counters in vLLM's own connector stats.

vLLM collects ``get_kv_connector_stats()`` from each worker every step and
logs the reduced sums with its periodic stats ("KV Transfer metrics"), so
an operator sees the pages kvpilot loaded into vLLM and what became of the
pages it was handed to save: copied to staging, committed (new to kvpilot),
skipped (the save queue or staging full, the host away, an earlier gap) or
failed.
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
        for f in FIELDS:
            self.data[f] = 0

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for f in FIELDS:
            self.data[f] = self.data.get(f, 0) + int(other.data.get(f, 0))
        return self

    def reduce(self) -> dict[str, int | float]:
        return {f: int(self.data.get(f, 0)) for f in FIELDS}

    def is_empty(self) -> bool:
        return not any(self.data.get(f, 0) for f in FIELDS)


class StatsDelta:
    """Turns running totals into the deltas vLLM wants per report."""

    def __init__(self) -> None:
        self._last = dict.fromkeys(FIELDS, 0)

    def take(self, totals: dict[str, Any]) -> KvpilotStats | None:
        now = {f: int(totals.get(f, 0)) for f in FIELDS}
        delta = {f: now[f] - self._last[f] for f in FIELDS}
        self._last = now
        stats = KvpilotStats(data=delta)
        return None if stats.is_empty() else stats
