"""What the scheduler-side connector tells the worker-side one each step.

vLLM pickles the metadata into every step's SchedulerOutput. Slots are
kvpilot staging slots of the registration named in each entry; a worker
whose registration differs (the host restarted in between) must not touch
them, since the slot numbers mean nothing in the new pools.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata


@dataclass
class PageLoad:
    """Copy matched pages from kvpilot's staging slots into vLLM blocks."""

    req_id: str
    registration_id: str
    staging_slots: list[int]
    block_ids: list[int]


@dataclass
class PageSave:
    """Copy freshly computed pages from vLLM blocks into staging slots, then
    commit the request's prompt up to ``end_page`` pages.

    Pages ``[first_page, end_page)`` are copied from ``block_ids`` into
    ``commit_slots[first_page:end_page]``; the commit passes every slot from
    the root (``commit_slots``), as kvpilot's Commit wants.
    """

    req_id: str
    kv_request_id: str
    registration_id: str
    tokens: list[int]
    commit_slots: list[int]
    first_page: int
    block_ids: list[int]

    @property
    def end_page(self) -> int:
        """Pages of ``tokens`` the commit covers."""
        return len(self.commit_slots)


@dataclass
class KvpilotConnectorMetadata(KVConnectorMetadata):
    """One step's loads, saves, and requests refused for bad parameters.

    ``refused`` maps a vLLM request id to why its kv_transfer_params were
    refused: the worker reports it as a failed KV load, which is how vLLM
    lets a connector fail one request (under ``kv_load_failure_policy``
    "fail", the default) or serve it without the connector ("recompute").
    """

    loads: list[PageLoad] = field(default_factory=list)
    saves: list[PageSave] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)

    def empty(self) -> bool:
        """Whether the step has nothing for kvpilot."""
        return not (self.loads or self.saves or self.refused)
