"""The worker side of the connector: copying pages through kvpilot's staging.

At start-up (``register``) the worker reads its KV cache tensors: one per
attention layer, checked against the layout the scheduler registers (heads,
block size, head size, dtype), and learns from the attention backend where a
page's keys and values sit in a block (kvpilot.vllm.blockmap). Then it
registers with the host in connector mode, joining the engine's
registration, and maps the staging arena.

Per step, before the forward (``load``): copy each planned page from its
staging slot into its vLLM block. After the forward (``save``): copy the
pages the prompt just completed from their vLLM blocks into their staging
slots, then Commit them; the host writes them through to its host tier.
A load that cannot be done exactly is reported to vLLM as failed blocks,
never left half-written; a save that fails is only a future cache miss.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import torch

from kvpilot.engine_types import Registration
from kvpilot.layout import torch_dtype
from kvpilot.vllm.amx import request_amx_permission
from kvpilot.vllm.blockmap import BlockMap, BlockMapError, probe
from kvpilot.vllm.geometry import check_parallelism, engine_id, geometry
from kvpilot.vllm.health import HostHealth
from kvpilot.vllm.hostlink import check_socket, connect
from kvpilot.vllm.metadata import KvpilotConnectorMetadata, PageLoad, PageSave
from kvpilot.vllm.settings import ConnectorConfigError, ConnectorSettings

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

    from kvpilot.engine import EngineClient

# A request id no request has: a call about it makes a stale client
# register again (see WorkerSide._current).


class WorkerSide:
    """The worker-side connector's copies and commits."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        kv_cache_config: KVCacheConfig,
        settings: ConnectorSettings,
        log: logging.Logger,
    ) -> None:
        check_parallelism(vllm_config)
        # Before any kernel runs: a kvpilot hit can make the first forward
        # too short for vLLM to have asked for AMX itself (kvpilot.vllm.amx).
        request_amx_permission(log)
        self.vllm_config = vllm_config
        self.settings = settings
        self.log = log
        self.geo = geometry(vllm_config, kv_cache_config, settings)
        self.engine_id = engine_id(vllm_config, settings)
        # Fail before the KV cache is allocated when no host is there.
        check_socket(settings)
        self.health = HostHealth("worker", settings.retry_after_s, log)
        self.client: EngineClient | None = None
        self.caches: list[torch.Tensor] = []
        self.block_map: BlockMap | None = None
        self._staging: dict[tuple[str, int, int], torch.Tensor] = {}
        self._failed_blocks: set[int] = set()
        self._refused: set[str] = set()
        #: Counters since start.
        self.counters = {"loaded_pages": 0, "saved_pages": 0, "committed_pages": 0}

    # -------------------------------------------------------------- start-up

    def register(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """register_kv_caches: check the tensors, learn the block map,
        register with the host. Raises ConnectorConfigError or BlockMapError.
        """
        lay = self.geo.layout
        heads, hd, page = lay.buffers[0].heads, lay.buffers[0].head_dim, lay.page_size
        want = torch_dtype(lay.dtype)
        caches = []
        for name in self.geo.layer_names:
            t = kv_caches.get(name)
            if t is None:
                raise ConnectorConfigError(
                    f"kvpilot connector: vLLM registered no KV cache for attention layer {name}"
                )
            if t.dim() != 4 or tuple(t.shape[1:]) != (heads, page, 2 * hd) or t.dtype != want:
                raise ConnectorConfigError(
                    f"kvpilot connector: KV cache of {name} is {t.dtype} "
                    f"{list(t.shape)}, not [blocks, {heads} heads, {page} tokens, {2 * hd}] "
                    f"{want}; vLLM's kernel blocks must be its --block-size (set --block-size "
                    "to a size the attention backend takes whole)"
                )
            if caches and (t.shape != caches[0].shape or t.stride() != caches[0].stride()):
                raise ConnectorConfigError(
                    f"kvpilot connector: KV cache of {name} has shape {list(t.shape)} and "
                    f"strides {t.stride()}, unlike the first layer's"
                )
            caches.append(t)
        layer = self.vllm_config.compilation_config.static_forward_context.get(
            self.geo.layer_names[0]
        )
        if layer is None:
            raise ConnectorConfigError(
                f"kvpilot connector: attention layer {self.geo.layer_names[0]} is not in vLLM's "
                "forward context"
            )
        try:
            self.block_map = probe(layer, caches[0], page, heads, hd)
        except BlockMapError as e:
            raise ConnectorConfigError(f"kvpilot connector: {e}") from None
        self.caches = caches
        self.client = connect(
            self.settings,
            self.geo,
            self.engine_id,
            reset_cache=self.settings.reset_cache,
            log=self.log,
            on_reregister=self._reregistered,
        )
        reg = self.client.registration
        self.log.info(
            "kvpilot connector (worker): engine %s registered with %s as %s (%s; %s; %d "
            "staging slots)",
            self.engine_id,
            self.settings.socket,
            reg.id,
            self.geo.describe(),
            self.block_map.describe(),
            self.client.device.slots,
        )

    # ----------------------------------------------------------------- loads

    def load(self, meta: KvpilotConnectorMetadata) -> None:
        """start_load_kv: staging slots -> vLLM blocks, all layers."""
        self._refused.update(meta.refused)
        for ld in meta.loads:
            ok = False
            try:
                ok = self._load(ld)
            except Exception as e:
                self.health.failed("loading pages from kvpilot", e)
            if not ok:
                self._failed_blocks.update(ld.block_ids)

    def _load(self, ld: PageLoad) -> bool:
        if (
            self.block_map is None
            or not ld.block_ids
            or len(ld.staging_slots) != len(ld.block_ids)
            or not self._current(ld.registration_id)
        ):
            return False
        device = self.caches[0].device
        slots = torch.tensor(ld.staging_slots, dtype=torch.long)
        blocks = torch.tensor(ld.block_ids, dtype=torch.long, device=device)
        for i, cache in enumerate(self.caches):
            k = self._stage(ld.registration_id, i, 0).index_select(0, slots)
            v = self._stage(ld.registration_id, i, 1).index_select(0, slots)
            self.block_map.pages_into(cache, blocks, k, v)
        self.counters["loaded_pages"] += len(ld.block_ids)
        return True

    def take_failed_blocks(self) -> set[int]:
        """get_block_ids_with_load_errors: blocks whose load failed since
        the last call.
        """
        out, self._failed_blocks = self._failed_blocks, set()
        return out

    def take_refused(self) -> set[str]:
        """Requests whose kv_transfer_params were refused, to report as
        failed loads.
        """
        out, self._refused = self._refused, set()
        return out

    # ----------------------------------------------------------------- saves

    def save(self, meta: KvpilotConnectorMetadata) -> None:
        """wait_for_save: vLLM blocks -> staging slots, then Commit."""
        for sv in meta.saves:
            if self.client is None or not self.health.usable():
                return
            try:
                if not self._save(sv):
                    continue
            except Exception as e:
                self.health.failed("saving pages to kvpilot", e)
                continue
            self.health.ok()

    def _save(self, sv: PageSave) -> bool:
        assert self.client is not None and self.block_map is not None
        n = sv.end_page - sv.first_page
        if n <= 0 or len(sv.block_ids) != n or not self._current(sv.registration_id):
            return False
        slots = torch.tensor(sv.commit_slots[sv.first_page : sv.end_page], dtype=torch.long)
        blocks = torch.tensor(sv.block_ids, dtype=torch.long, device=self.caches[0].device)
        for i, cache in enumerate(self.caches):
            k, v = self.block_map.pages_from(cache, blocks)
            self._stage(sv.registration_id, i, 0).index_copy_(0, slots, k.cpu())
            self._stage(sv.registration_id, i, 1).index_copy_(0, slots, v.cpu())
        self.counters["saved_pages"] += n
        r = self.client.commit(
            sv.kv_request_id, sv.tokens, sv.commit_slots, timeout=self.settings.timeout_s
        )
        self.counters["committed_pages"] += r.stored
        return True

    # --------------------------------------------------------------- helpers

    def _stage(self, registration_id: str, layer: int, buf: int) -> torch.Tensor:
        """The staging arena's ``[slots, page, heads, dim]`` tensor of (layer,
        buf), as integers of the element size (copies move bits).
        """
        key = (registration_id, layer, buf)
        t = self._staging.get(key)
        if t is None:
            assert self.client is not None
            t = self.client.device.tensor(layer, buf)
            t = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])
            self._staging[key] = t
        return t

    def _current(self, registration_id: str) -> bool:
        """Whether this worker's staging mapping is the registration's.

        After a host restart the scheduler may register again before the
        worker does; slots it hands out then mean nothing in the old
        mapping. A call brings the worker's client onto the new registration
        (it registers again when the host does not know the old one).
        """
        if self.client is None:
            return False
        if self.client.registration.id == registration_id:
            return True
        with contextlib.suppress(Exception):
            self.client.ensure_registered(timeout=self.settings.timeout_s)
        return self.client.registration.id == registration_id

    def _reregistered(self, reg: Registration) -> None:
        self._staging.clear()
        self.log.info(
            "kvpilot connector (worker): the kvpilot host restarted; registered again as %s",
            reg.id,
        )

    def close(self) -> None:
        """Drops the staging views and closes the connection to the host."""
        self._staging.clear()
        if self.client is not None:
            self.client.close()
