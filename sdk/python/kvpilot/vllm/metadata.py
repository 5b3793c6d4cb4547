"""What the two sides of the connector tell each other each step.

Scheduler to worker (KvpilotConnectorMetadata, pickled into every step's
SchedulerOutput): the pages to load before the forward, the pages to save
after it, and the requests whose saves must stop before it. Slots are
kvpilot staging slots of the registration named in each entry; a worker
whose registration differs (the host restarted in between) must not touch
them, since the slot numbers mean nothing in the new pools.

Worker to scheduler (KvpilotWorkerMetadata, in the step's output): which
kvpilot requests' background saves are over, so the scheduler may end them
(kvpilot.vllm.saver).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)


@dataclass
class PageLoad:
    """Copy matched pages from kvpilot's staging slots into vLLM blocks."""

    req_id: str
    registration_id: str
    staging_slots: list[int]
    block_ids: list[int]


@dataclass
class PageSave:
    """Save the prompt pages ``[first_page, end_page)`` of one kvpilot request.

    The worker allocates staging slots for them, copies them there from
    ``block_ids`` and commits the prompt up to ``end_page`` (kvpilot's
    Commit names the pages before ``first_page`` by their tokens alone).
    ``matched_slots`` are the slots of the pages the request matched in
    kvpilot: its first save starts after them, and a host without the
    ``commit_first_page`` feature is sent them (and every slot since).

    ``background``: the save runs behind the forward, and vLLM keeps the
    request's blocks until the worker reports it done; otherwise the worker
    saves before the step ends (a request that pins its pages with
    cache_control, whose Finish must see them committed).
    """

    req_id: str
    kv_request_id: str
    registration_id: str
    tokens: list[int]
    matched_slots: list[int]
    first_page: int
    end_page: int
    block_ids: list[int]
    background: bool = True

    @property
    def pages(self) -> int:
        """Pages this save copies."""
        return self.end_page - self.first_page


@dataclass
class KvpilotConnectorMetadata(KVConnectorMetadata):
    """One step's loads, saves, stopped requests, and refusals.

    ``preempted`` lists vLLM requests preempted this step: vLLM frees their
    blocks at once, so the worker stops their background saves before the
    forward writes into those blocks. ``refused`` maps a vLLM request id to
    why its kv_transfer_params were refused: the worker reports it as a
    failed KV load, which is how vLLM lets a connector fail one request
    (under ``kv_load_failure_policy`` "fail", the default) or serve it
    without the connector ("recompute").
    """

    loads: list[PageLoad] = field(default_factory=list)
    saves: list[PageSave] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    #: vLLM scheduled no tokens: a step it takes only to hear from the
    #: connector (has_pending_push_work).
    idle: bool = False

    def empty(self) -> bool:
        """Whether the step has nothing for kvpilot."""
        return not (self.loads or self.saves or self.preempted or self.refused)


@dataclass
class KvpilotWorkerMetadata(KVConnectorWorkerMetadata):
    """Background saves the worker finished since its last report:
    ``done[kv_request_id]`` of them (committed, skipped or failed alike).
    """

    done: dict[str, int] = field(default_factory=dict)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        """Sums two workers' reports (vLLM's tensor-parallel ranks each
        report the saves they ran).
        """
        if isinstance(other, KvpilotWorkerMetadata):
            for kv_id, n in other.done.items():
                self.done[kv_id] = self.done.get(kv_id, 0) + n
        return self
