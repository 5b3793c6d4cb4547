"""The worker side of the connector: copying pages through kvpilot's staging.

At start-up (``register``) the worker reads its KV cache tensors: one per
attention layer, checked against the layout the scheduler registers (heads,
block size, head size, dtype), and learns from the attention backend where a
page's keys and values sit in a block (kvpilot.vllm.blockmap). Then it
registers with the host in connector mode, joining the engine's
registration, and maps the staging arena.

Per step, before the forward (``load``): write each planned page from its
staging slot into its vLLM block with the layer's own cache-write kernel
(``impl.do_kv_cache_update``, what the forward stores new tokens with, as
though the page's tokens had just been computed). After the forward
(``save``): hand the pages the prompt just completed to the saver
(kvpilot.vllm.saver), which copies them into staging and commits them
behind the forward; the host writes them through to its host tier. A load
that cannot be done exactly is reported to vLLM as failed blocks, never
left half-written; a save that fails or is skipped is only a future cache
miss.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from kvpilot.engine_types import Registration
from kvpilot.layout import as_bits, torch_dtype
from kvpilot.vllm.amx import request_amx_permission
from kvpilot.vllm.blockmap import BlockMap, BlockMapError, probe, probe_mla, rows
from kvpilot.vllm.geometry import engine_id, geometry
from kvpilot.vllm.health import HostHealth
from kvpilot.vllm.hostlink import check_socket, connect
from kvpilot.vllm.metadata import KvpilotConnectorMetadata, KvpilotWorkerMetadata, PageLoad
from kvpilot.vllm.saver import Saver
from kvpilot.vllm.settings import ConnectorConfigError, ConnectorSettings
from kvpilot.vllm.stats import StatsDelta

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

    from kvpilot.engine import EngineClient
    from kvpilot.vllm.stats import KvpilotStats


class WorkerSide:
    """The worker-side connector's copies and commits."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        kv_cache_config: KVCacheConfig,
        settings: ConnectorSettings,
        log: logging.Logger,
    ) -> None:
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
        #: vLLM's attention layer of each cache (its kernel writes loads).
        self.layers: list[Any] = []
        self.block_map: BlockMap | None = None
        #: An fp8 cache: loads write its bytes back through the block map.
        self.quantized = False
        #: This rank's part of a page (1..parts) and the page heads it holds
        #: (all of them with one rank).
        self.part = 0
        self.heads = slice(None)
        self._staging: dict[tuple[str, int, int], torch.Tensor] = {}
        self._failed_blocks: set[int] = set()
        self._refused: set[str] = set()
        self.saver = Saver(self, log)
        self._stats = StatsDelta()
        #: Pages loaded into vLLM since start (saves count in saver.counters).
        self.counters = {"loaded_pages": 0}

    # -------------------------------------------------------------- start-up

    def register(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """register_kv_caches: check the tensors, learn the block map,
        register with the host. Raises ConnectorConfigError or BlockMapError.
        """
        lay = self.geo.layout
        heads = self.geo.local_heads or lay.buffers[0].heads
        hd, page = lay.buffers[0].head_dim, lay.page_size
        if self.geo.parts > 1:
            from vllm.distributed import get_tensor_model_parallel_rank

            rank = get_tensor_model_parallel_rank()
            self.part, self.heads = rank + 1, self.geo.heads_of(rank)
        want = torch_dtype(lay.dtype)
        # vLLM keeps a quantized cache as bytes; its elements are fp8.
        self.quantized = lay.dtype.startswith("fp8")
        given = torch.uint8 if self.quantized else want
        # Per block: [heads, tokens, K and V of a head], or MLA's rows.
        shape = (page, hd) if self.geo.mla else (heads, page, 2 * hd)
        caches: list[torch.Tensor] = []
        for name in self.geo.layer_names:
            t = kv_caches.get(name)
            if t is None:
                raise ConnectorConfigError(
                    f"kvpilot connector: vLLM registered no KV cache for attention layer {name}"
                )
            if self.geo.mla and t.dim() == 4 and t.shape[1] == 1:
                t = t.squeeze(1)  # vLLM hands MLA caches over as one "head"
            if tuple(t.shape[1:]) != shape or t.dtype != given:
                raise ConnectorConfigError(
                    f"kvpilot connector: KV cache of {name} is {t.dtype} "
                    f"{list(t.shape)}, not [blocks, {', '.join(map(str, shape))}] {given} "
                    "([blocks, heads, tokens, K and V of a head], or MLA's [blocks, tokens, "
                    "row]); vLLM's kernel blocks must be its --block-size (set --block-size "
                    "to a size the attention backend takes whole)"
                )
            if caches and (t.shape != caches[0].shape or t.stride() != caches[0].stride()):
                raise ConnectorConfigError(
                    f"kvpilot connector: KV cache of {name} has shape {list(t.shape)} and "
                    f"strides {t.stride()}, unlike the first layer's"
                )
            caches.append(t)
        ctx = self.vllm_config.compilation_config.static_forward_context
        layers = [ctx.get(name) for name in self.geo.layer_names]
        for name, layer in zip(self.geo.layer_names, layers, strict=True):
            if layer is None:
                raise ConnectorConfigError(
                    f"kvpilot connector: attention layer {name} is not in vLLM's forward context"
                )
        # An fp8 cache's kernel is handed keys and values in the model's
        # dtype (resolved from "auto" by now).
        computed = self.vllm_config.model_config.dtype if self.quantized else None
        try:
            if self.geo.mla:
                rope = self.geo.layout.rope
                assert rope is not None
                probe_mla(layers[0], caches[0], page, rope.offset, rope.dim)
            else:
                self.block_map = probe(
                    layers[0],
                    caches[0],
                    page,
                    heads,
                    hd,
                    stored=want if self.quantized else None,
                    computed=computed if isinstance(computed, torch.dtype) else None,
                )
        except BlockMapError as e:
            raise ConnectorConfigError(f"kvpilot connector: {e}") from None
        self.caches = caches
        self.layers = layers
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
            "staging slots%s)",
            self.engine_id,
            self.settings.socket,
            reg.id,
            self.geo.describe(),
            self.block_map.describe() if self.block_map else "rows [kv_c | k_pe] as vLLM's",
            self.client.device.slots,
            f"; part {self.part} of {self.geo.parts}, heads "
            f"{self.heads.start}-{self.heads.stop - 1}"
            if self.part
            else "",
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
            (self.block_map is None and not self.geo.mla)
            or not ld.block_ids
            or len(ld.staging_slots) != len(ld.block_ids)
            or not self.current(ld.registration_id)
        ):
            return False
        t0 = time.perf_counter()
        device = self.caches[0].device
        page = self.geo.layout.page_size
        blocks = torch.tensor(ld.block_ids, dtype=torch.long, device=device)
        # The blocks' token slots, as the forward's slot mapping names them.
        token_slots = (blocks.view(-1, 1) * page + torch.arange(page, device=device)).flatten()
        for i, (layer, cache) in enumerate(zip(self.layers, self.caches, strict=True)):
            if self.geo.mla:
                # [kv_c | k_pe] rows, as the kernel stores them: copied whole.
                pages = _take(as_bits(self._stage(ld.registration_id, i, 0)), ld.staging_slots)
                as_bits(cache).index_copy_(0, blocks, pages.flatten(2).to(device))
                continue
            # This rank's heads of the pages: [n, page, heads, dim].
            k_stage = self._stage(ld.registration_id, i, 0)[:, :, self.heads]
            v_stage = self._stage(ld.registration_id, i, 1)[:, :, self.heads]
            if self.quantized:
                # The kernel would quantize them again: the saved bytes go back.
                assert self.block_map is not None
                k = _take(as_bits(k_stage), ld.staging_slots)
                v = _take(as_bits(v_stage), ld.staging_slots)
                self.block_map.pages_into(cache, blocks, k, v)
                continue
            k = _take(k_stage, ld.staging_slots).flatten(0, 1).to(device)
            v = _take(v_stage, ld.staging_slots).flatten(0, 1).to(device)
            layer.impl.do_kv_cache_update(layer, k, v, cache, token_slots)
        self.counters["loaded_pages"] += len(ld.block_ids)
        self.log.debug(
            "kvpilot connector (worker): loaded %d pages of request %s in %.1f ms",
            len(ld.block_ids),
            ld.req_id,
            (time.perf_counter() - t0) * 1000,
        )
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

    def handle_preemptions(self, meta: KvpilotConnectorMetadata) -> None:
        """Before the forward: nothing copies out of preempted requests'
        blocks any more.
        """
        self.saver.stop_preempted(meta)

    def save(self, meta: KvpilotConnectorMetadata) -> None:
        """wait_for_save: the step's saves, behind the forward."""
        self.saver.save(meta)

    def finished_sending(self, finished: set[str]) -> set[str]:
        """Finished requests whose blocks vLLM may now free."""
        return self.saver.finished_sending(finished)

    def worker_meta(self) -> KvpilotWorkerMetadata | None:
        """What the scheduler side hears of this step's saves."""
        return self.saver.worker_meta()

    def stats(self) -> KvpilotStats | None:
        """get_kv_connector_stats: the counters since the last report."""
        return self._stats.take({**self.counters, **self.saver.counters.as_dict()})

    def copy_out(
        self, registration_id: str, block_ids: Sequence[int], slots: Sequence[int]
    ) -> None:
        """Copies the pages of vLLM blocks block_ids into staging slots
        (all layers). Called on the save thread.
        """
        blocks = torch.tensor(list(block_ids), dtype=torch.long, device=self.caches[0].device)
        for i, cache in enumerate(self.caches):
            if self.geo.mla:
                pages = as_bits(cache).index_select(0, blocks).unsqueeze(2)  # one "head"
                _put(as_bits(self._stage(registration_id, i, 0)), slots, pages)
                continue
            assert self.block_map is not None
            k, v = self.block_map.pages_from(cache, blocks)
            _put(as_bits(self._stage(registration_id, i, 0))[:, :, self.heads], slots, k)
            _put(as_bits(self._stage(registration_id, i, 1))[:, :, self.heads], slots, v)

    # --------------------------------------------------------------- helpers

    def _stage(self, registration_id: str, layer: int, buf: int) -> torch.Tensor:
        """The staging arena's ``[slots, page, heads, dim]`` tensor of (layer,
        buf), in the cache's dtype.
        """
        key = (registration_id, layer, buf)
        t = self._staging.get(key)
        if t is None:
            assert self.client is not None
            t = self.client.device.tensor(layer, buf)
            self._staging[key] = t
        return t

    def current(self, registration_id: str) -> bool:
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
        """Lets queued saves finish (up to the call timeout), drops the
        staging views and closes the connection to the host.
        """
        self.saver.close(self.settings.timeout_s)
        self._staging.clear()
        if self.client is not None:
            self.client.close()


def _take(stage: torch.Tensor, slots: Sequence[int]) -> torch.Tensor:
    """The staging pages in slots: a view for a run of slots, else a copy."""
    view = rows(stage, slots)
    if view is not None:
        return view
    return stage.index_select(0, torch.tensor(list(slots), dtype=torch.long))


def _put(stage: torch.Tensor, slots: Sequence[int], pages: torch.Tensor) -> None:
    """Writes pages into the staging slots."""
    view = rows(stage, slots)
    if view is not None:
        view.copy_(pages.to(stage.device))
    else:
        stage.index_copy_(0, torch.tensor(list(slots), dtype=torch.long), pages.to(stage.device))
