"""KvpilotConnector: vLLM's KV connector API (v1) on a kvpilot host.

vLLM loads it without patches::

    vllm serve MODEL --block-size 32 --kv-transfer-config '{
        "kv_connector": "KvpilotConnector",
        "kv_connector_module_path": "kvpilot.vllm",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"socket": "/run/kvpilot/engine.sock"}}'

vLLM creates one instance per role: in the scheduler (kvpilot.vllm.scheduler:
which prefix kvpilot holds, which pages to load and save) and in each worker
(kvpilot.vllm.worker: the copies between vLLM's paged KV cache and kvpilot's
staging arena). Both register with the host in connector mode under the
engine's id and share one registration, so a request matched by the
scheduler is committed by the worker.

kvpilot keeps every page the engine computes (prompt pages, written through
to its host tier and below) and serves them back to any later engine that
registers the same model and layout, across restarts of vLLM. Requests may
carry ``kv_transfer_params={"kvpilot": {"session", "tenant",
"cache_control"}}`` (kvpilot.vllm.params); outputs carry
``kv_transfer_params["kvpilot"]`` with what kvpilot did for the request.

``kv_role`` "kv_both" loads and saves; "kv_consumer" only loads (an engine
that reads kvpilot's cache and adds nothing), "kv_producer" only saves.

The connector logs under vLLM's logger (``vllm.kvpilot``), so vLLM's logging
settings apply to it.

Under tensor parallelism the engine's ranks share the registration as parts
of it: each saves and loads its slice of a page's KV heads, and the host
caches a page once every rank committed its slice (kvpilot.vllm.saver).

Limits: full-attention models with K and V (MHA, GQA, MQA), MLA, and models
mixing sliding-window with full-attention layers; no pipeline or
decode-context parallelism; kv_cache_dtype auto or fp8; vLLM's block size
is kvpilot's page size. Pages that live only in vLLM's memory are
beyond kvpilot's directives (README: "Two engine modes"): a splice or pin acts on
kvpilot's copies, which the next match finds.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    KVConnectorWorkerMetadata,
)
from vllm.v1.metrics.cache_hit_source import CacheHitSource

from kvpilot.vllm.metadata import KvpilotConnectorMetadata
from kvpilot.vllm.scheduler import SchedulerSide
from kvpilot.vllm.settings import LOGGER_NAME, ConnectorSettings
from kvpilot.vllm.stats import KvpilotStats
from kvpilot.vllm.worker import WorkerSide

if TYPE_CHECKING:
    from collections.abc import Iterable

    import torch
    from vllm.config import VllmConfig
    from vllm.distributed.kv_events import KVCacheEvent
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

log = logging.getLogger(LOGGER_NAME)


class KvpilotConnector(KVConnectorBase_V1):
    """vLLM's KV connector on a kvpilot host (connector mode)."""

    # Pages come from kvpilot's shared memory: its staging arena and host
    # tier (loaded back from disk or remote first when they were there).
    _cache_hit_source = CacheHitSource.HOST

    def __init__(
        self,
        vllm_config: VllmConfig,
        role: KVConnectorRole,
        kv_cache_config: KVCacheConfig,
    ) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        settings = ConnectorSettings.from_extra_config(
            self._kv_transfer_config.kv_connector_extra_config
        )
        self._sched: SchedulerSide | None = None
        self._work: WorkerSide | None = None
        if role == KVConnectorRole.SCHEDULER:
            self._sched = SchedulerSide(vllm_config, kv_cache_config, settings, log)
        else:
            self._work = WorkerSide(vllm_config, kv_cache_config, settings, log)

    @classmethod
    def supports_sleep_mode(cls, kv_transfer_config: Any) -> bool:
        """VLLM 0.33's sleep mode unmaps the KV cache while the save thread
        may still copy out of it, and maps it again under the block map
        learned at start-up: not supported, so vLLM refuses
        ``--enable-sleep-mode`` with this connector at start-up rather than
        risk a copy of unmapped or remapped memory. (vLLM 0.32 has no such
        hook and never asks.)
        """
        return False

    @property
    def requires_kv_delivery(self) -> bool:
        """A best-effort cache: a dropped save is only a future miss."""
        return False

    # ============================================================ worker side

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """Checks the KV cache tensors and registers with the host."""
        assert self._work is not None
        self._work.register(kv_caches)

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        """Stops background saves out of preempted requests' blocks before
        the forward reuses them.
        """
        if self._work is not None and isinstance(kv_connector_metadata, KvpilotConnectorMetadata):
            self._work.handle_preemptions(kv_connector_metadata)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        """Copies this step's matched pages into vLLM's blocks (all layers)."""
        if self._work is not None and self.has_connector_metadata():
            meta = self._get_connector_metadata()
            if isinstance(meta, KvpilotConnectorMetadata):
                self._work.load(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Loads complete in start_load_kv: nothing to wait for."""
        return

    def save_kv_layer(
        self,
        layer_name: str,
        kv_layer: torch.Tensor,
        attn_metadata: AttentionMetadata,
        **kwargs: Any,
    ) -> None:
        """Saves happen once per step, in wait_for_save."""
        return

    def wait_for_save(self) -> None:
        """Hands the pages the step completed to the background saver (the
        pages of a request that pins them are saved before returning).
        """
        if self._work is not None and self.has_connector_metadata():
            meta = self._get_connector_metadata()
            if isinstance(meta, KvpilotConnectorMetadata):
                self._work.save(meta)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """Finished requests whose background saves are over (vLLM frees
        their blocks), and requests refused for their kv_transfer_params as
        failed loads: vLLM then fails just them (kv_load_failure_policy
        "fail") or serves them without kvpilot ("recompute").
        """
        if self._work is None:
            return KVConnectorTransferResults()
        refused = self._work.take_refused()
        return KVConnectorTransferResults(
            finished_sending=self._work.finished_sending(finished_req_ids),
            finished_recving=set(refused),
            failed_recving=refused,
        )

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        """Pages loaded, saved, skipped and failed since the last step, for
        vLLM's stats log (kvpilot.vllm.stats).
        """
        return self._work.stats() if self._work is not None else None

    @classmethod
    def build_kv_connector_stats(
        cls, data: dict[str, Any] | None = None
    ) -> KVConnectorStats | None:
        """Rebuilds the workers' stats from their dicts, for vLLM's logger."""
        return KvpilotStats(data=dict(data or {}))

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        """The background saves done since the last step."""
        return self._work.worker_meta() if self._work is not None else None

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Blocks whose pages could not be loaded exactly."""
        return self._work.take_failed_blocks() if self._work is not None else set()

    def shutdown(self) -> None:
        """Closes the connection to the host."""
        if self._work is not None:
            self._work.close()
        if self._sched is not None:
            self._sched.close()

    # ========================================================= scheduler side

    def bind_kv_cache_manager(self, kv_cache_manager: KVCacheManager) -> None:
        """Keeps the cache manager, to read a running request's blocks."""
        super().bind_kv_cache_manager(kv_cache_manager)
        if self._sched is not None:
            self._sched.kv_cache_manager = kv_cache_manager

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        """Tokens kvpilot holds beyond vLLM's own prefix hit (page-aligned)."""
        assert self._sched is not None
        return self._sched.lookup(request, num_computed_tokens)

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        """Plans the load of the tokens vLLM took from kvpilot."""
        assert self._sched is not None
        self._sched.allocated(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        """Builds the step's loads and saves for the worker."""
        assert self._sched is not None
        return self._sched.build_meta(scheduler_output)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """Ends the kvpilot requests whose background saves are done."""
        if self._sched is not None:
            self._sched.saves_done(connector_output)

    def has_pending_push_work(self) -> bool:
        """Whether requests wait for the worker's saves (vLLM keeps stepping
        to hear of them).
        """
        return self._sched is not None and self._sched.waiting_on_worker()

    def take_events(self) -> Iterable[KVCacheEvent]:
        """The pages entering and leaving kvpilot's tiers, for vLLM's KV
        event publisher (kvpilot.vllm.events).
        """
        return self._sched.take_events() if self._sched is not None else ()

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        """Finishes the request in kvpilot; its blocks are kept while its
        background saves run.
        """
        assert self._sched is not None
        hold, info = self._sched.finished(request)
        return hold, ({"kvpilot": info} if info is not None else None)
