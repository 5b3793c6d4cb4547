"""KvpilotStorage: SGLang HiCache's L3 storage tier on a kvpilot host.

SGLang keeps its own device and host pools; kvpilot's tiers sit behind them
as L3, shared by every worker that registers the same model and layout with
the host (and, through its shared remote tier, by every host). The backend
speaks kvpilot's engine protocol in connector mode, as the vLLM connector
does: the host's device tier is a staging arena in shared memory that pages
pass through, and what is committed there is written through to the host
tier, announced in kvpilot's KV events under kvpilot's block hashes, and
steered by kvpilot's directives (pins with a TTL, pause, warm, prune).

Per call:

- ``batch_exists``: the page tokens come from the ledger
  (kvpilot.sglang.ledger, kvpilot.sglang.origin); a Match of the tokens
  from the root finds how many of the keys kvpilot holds (loading them back
  from disk or remote, which a following get then finds in staging, and
  refreshing their pins: a hit keeps a pinned prefix pinned);
- ``batch_get_v1``: Match, copy the matched pages from staging into SGLang's
  host pool rows, Release;
- ``batch_set_v1``: Match, Allocate staging slots for the pages kvpilot does
  not hold, copy them from SGLang's host pool, Commit, Release. Pages
  kvpilot already holds are not written again (SGLang may write a key
  twice).

Tensor parallelism follows SGLang's own rule for storage (its cache
controller, ``HiCacheController``): before a storage hit is used, every rank
takes the smallest hit any rank reported (an all-reduce MIN,
``_sync_prefetch_hit_query``), and after a prefetch the smallest prefix any
rank loaded (``_reduce_prefetch_ack``). K/V (MHA) ranks each hold a slice of
the heads and register with a host of their own; a page one rank's host
lacks is a miss on every rank. An MLA pool's rows are the same on every rank
and SGLang writes them from one rank only (``is_storage_writer``, rank 0),
so its ranks share one registration on one host, and the others never
write. Every rank then answers a lookup from the same knowledge: what
SGLang looked up, which every rank does alike (``batch_exists`` in the same
order with the same tokens), never what only the writer saw in its own
backups; so the MIN reduction sees one answer on every rank, not the
writer's hits cut to a non-writer's misses.

Nothing on the data path raises into SGLang: any failure is a miss (or a
write that did not happen), a host that is down or slow past ``timeout_s``
is left alone for ``retry_after_s`` (kvpilot.hosthealth), and SGLang goes
on without it. Attaching is where a wrong setting or a layout kvpilot cannot
serve stops with one message naming what to change.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

from kvpilot.engine import EngineClient
from kvpilot.engine_types import MatchResult
from kvpilot.errors import HostRestarted, KvpilotError
from kvpilot.hosthealth import HostHealth
from kvpilot.layout import RopeConfig, as_bits
from kvpilot.sglang.ledger import Ledger, Path
from kvpilot.sglang.origin import learn_from_caller
from kvpilot.sglang.pages import PoolPages
from kvpilot.sglang.settings import (
    KEY_PREFIX,
    LOGGER_NAME,
    StorageConfigError,
    StorageSettings,
)
from kvpilot.unixsock import socket_problem

if TYPE_CHECKING:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo

log = logging.getLogger(LOGGER_NAME)

T = TypeVar("T")

# Registering may wait for a host that is still starting.
_REGISTER_TIMEOUT_S = 15.0

# The tensor-parallel rank that writes an MLA pool's replicated pages:
# SGLang's HiCacheStorageConfig.is_storage_writer without decode context
# parallelism (refused here), i.e. tp_rank == dcp_rank == 0.
_MLA_WRITER_TP_RANK = 0


class KvpilotStorage(HiCacheStorage):
    """SGLang's HiCache storage backend on a kvpilot host (connector mode).

    SGLang constructs it as ``KvpilotStorage(storage_config, kwargs)``
    (``--hicache-storage-backend dynamic``); see kvpilot.sglang.settings for
    the extra config. Raises StorageConfigError for settings it cannot use.
    """

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Any = None) -> None:
        self.storage_config = cfg = storage_config
        _check_parallelism(cfg)
        #: The pool is rank-replicated (MLA): every tensor-parallel rank of
        #: the engine joins one registration on one host.
        self.replicated = bool(cfg.is_mla_model)
        #: This rank writes pages (SGLang backs up from writer ranks only).
        self.writer = bool(cfg.is_storage_writer)
        tp_rank = _MLA_WRITER_TP_RANK if self.replicated else cfg.tp_rank
        self.settings = StorageSettings.from_extra_config(
            cfg.extra_config,
            {"tp_rank": tp_rank, "pp_rank": cfg.pp_rank, "dp_rank": cfg.dp_rank},
        )
        self.health = HostHealth(
            "storage",
            self.settings.retry_after_s,
            log,
            integration="kvpilot SGLang backend",
            engine="SGLang",
        )
        self.pages: PoolPages | None = None
        #: The tokens of the keys lookups and reads resolve (fed by lookups).
        self.ledger: Ledger | None = None
        #: The tokens of the keys writes resolve (fed by lookups and writes);
        #: the lookup ledger itself unless ranks must answer lookups alike.
        self.write_ledger: Ledger | None = None
        self.client: EngineClient | None = None
        # SGLang's backup and prefetch threads call in at once.
        self._staging_lock = threading.Lock()
        self._staging: dict[tuple[int, int], torch.Tensor] = {}
        self._staging_reg = ""
        self._warned: set[str] = set()
        self._stats_lock = threading.Lock()
        self._prefetch_pgs: list[int] = []
        self._backup_pgs: list[int] = []
        #: Counters since attach.
        self.counters = {
            "exists_calls": 0,
            "hit_pages": 0,
            "got_pages": 0,
            "set_pages": 0,
            "stored_pages": 0,
            "unknown_tokens": 0,
        }

    # -------------------------------------------------------------- attach

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Reads SGLang's host pool and registers its layout with the host.

        Raises StorageConfigError (the attach fails) for a pool or layout
        kvpilot cannot serve, or when no host answers on the socket.
        """
        super().register_mem_pool_host(mem_pool_host)
        pages = PoolPages.of(mem_pool_host)
        if pages.mla != self.replicated:
            raise StorageConfigError(
                f"kvpilot SGLang backend: SGLang's storage config says is_mla_model="
                f"{self.replicated}, but the host pool is a {type(pages.pool).__name__}: kvpilot "
                "cannot tell which ranks write its pages; run without the kvpilot backend"
            )
        self.pages = pages
        self.ledger = Ledger(pages.page_size, self.settings.ledger_pages)
        self.write_ledger = self.ledger
        if self.replicated and self.storage_config.tp_size > 1:
            # Only the writer sees backups: lookups must not use what they
            # teach, or the writer would answer hits its peers cannot.
            self.write_ledger = Ledger(pages.page_size, self.settings.ledger_pages)
        self.client = self._connect(pages)
        reg = self.client.registration
        cfg = self.storage_config
        log.info(
            "kvpilot SGLang backend: rank tp%d/%d registered with %s as %s (%s%s, %s layout, "
            "page size %d, %d layers, %s; %d staging slots)",
            cfg.tp_rank,
            cfg.tp_size,
            self.settings.socket,
            reg.id,
            self.client.layout.model,
            (
                ""
                if not self.replicated
                else f", one registration for all {cfg.tp_size} ranks, "
                + ("this rank writes" if self.writer else "rank 0 writes")
            ),
            pages.layout,
            pages.page_size,
            pages.layers,
            pages.describe(),
            self.client.device.slots,
        )

    def on_host_pools_registered(self) -> None:
        """Refuses models whose cache has pools besides K/V (sliding window,
        Mamba state, sparse indexers; SGLang registers each by name first):
        kvpilot stores K/V pages only.
        """
        others = sorted(str(n) for n in getattr(self, "registered_pools", {}) if str(n) != "kv")
        if others:
            raise StorageConfigError(
                f"kvpilot SGLang backend: this model's cache has pools kvpilot does not store "
                f"({', '.join(others)}); kvpilot serves full-attention K/V pages only: run this "
                "model without the kvpilot backend"
            )

    def _connect(self, pages: PoolPages) -> EngineClient:
        s, cfg = self.settings, self.storage_config
        why = socket_problem(s.socket, timeout=2.0)
        if why is not None:
            raise StorageConfigError(
                f"kvpilot SGLang backend: no kvpilot host at socket={s.socket} ({why}): start "
                "`kvpilot serve` with engine.socket at that path, or set 'socket' in "
                f"{KEY_PREFIX} to the socket it serves"
            )
        model = s.model or cfg.model_name or "sglang"
        # The host joins connector-mode processes registering one engine id
        # and layout into one registration: an MLA engine's ranks share it
        # (no rank in the id); K/V ranks, on hosts of their own, do not.
        tp = f"mla-tp{cfg.tp_size}" if self.replicated else f"tp{cfg.tp_rank}of{cfg.tp_size}"
        engine_id = s.engine_id or f"sglang:{model}:{tp}:pp{cfg.pp_rank}:dp{cfg.dp_rank}"
        layout = pages.kvpilot_layout(model, s)
        try:
            return EngineClient(
                s.socket,
                layout,
                RopeConfig(base=s.rope_theta) if s.rope_theta > 0 else None,
                engine_id=engine_id,
                mode="connector",
                # A reset registers anew, retiring the live registration: only
                # the writer asks, so ranks joining it never drop its pages.
                reset_cache=s.reset_cache and self.writer,
                timeout=_REGISTER_TIMEOUT_S,
                logger=log,
            )
        except KvpilotError as e:
            raise StorageConfigError(
                f"kvpilot SGLang backend: registering with the kvpilot host at socket={s.socket} "
                f"failed: {e}; a host holding another model's pages needs 'reset_cache': true "
                f"in {KEY_PREFIX}, or a host of its own"
            ) from None

    # ------------------------------------------------------------ v1 calls

    def batch_exists(
        self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> int:
        """How many of ``keys``, from the first, kvpilot holds."""
        return self._guard("looking pages up in kvpilot", 0, self._exists, keys, extra_info)

    def batch_get_v1(
        self,
        keys: list[str],
        host_indices: torch.Tensor,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> list[bool]:
        """Copies the pages kvpilot holds into SGLang's host rows."""
        miss = [False] * len(keys)
        return self._guard(
            "reading pages from kvpilot", miss, self._get, keys, host_indices, extra_info
        )

    def batch_set_v1(
        self,
        keys: list[str],
        host_indices: torch.Tensor,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> list[bool]:
        """Stores SGLang's host rows of ``keys`` in kvpilot."""
        miss = [False] * len(keys)
        return self._guard(
            "writing pages to kvpilot", miss, self._set, keys, host_indices, extra_info
        )

    # ------------------------------------------------------- generic calls

    def exists(self, key: str) -> bool:
        """Whether kvpilot holds the page ``key``."""
        return self.batch_exists([key]) == 1

    def get(
        self, key: str, target_location: Any = None, target_sizes: Any = None
    ) -> torch.Tensor | None:
        """One page, in SGLang's flat page format, into ``target_location``."""
        return self.batch_get([key], [target_location])[0]

    def batch_get(
        self, keys: list[str], target_locations: Any = None, target_sizes: Any = None
    ) -> list[torch.Tensor | None]:
        """Pages in SGLang's flat format, into ``target_locations``."""
        miss: list[torch.Tensor | None] = [None] * len(keys)
        return self._guard(
            "reading pages from kvpilot", miss, self._get_flat, keys, target_locations
        )

    def set(
        self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None
    ) -> bool:
        """Stores one page given in SGLang's flat format."""
        return self.batch_set([key], [value])

    def batch_set(
        self,
        keys: list[str],
        values: Any = None,
        target_locations: Any = None,
        target_sizes: Any = None,
    ) -> bool:
        """Stores pages given in SGLang's flat format; True when all were."""
        done = self._guard("writing pages to kvpilot", [False], self._set_flat, keys, values)
        return all(done) and len(done) == len(keys)

    def clear(self) -> None:
        """Does not drop kvpilot's pages: other workers share them. Drop
        them on the host (``kvpilot ctl``, or 'reset_cache' at attach).
        """
        log.info(
            "kvpilot SGLang backend: clear leaves kvpilot's pages in place (other workers share "
            "them)"
        )

    def get_stats(self) -> Any:
        """Pages moved per call since the last get_stats, for SGLang's
        storage metrics.
        """
        from sglang.srt.observability.metrics_collector import StorageMetrics

        with self._stats_lock:
            m = StorageMetrics(prefetch_pgs=self._prefetch_pgs, backup_pgs=self._backup_pgs)
            self._prefetch_pgs, self._backup_pgs = [], []
        return m

    def close(self) -> None:
        """Closes the connection to the host."""
        self._staging.clear()
        if self.client is not None:
            self.client.close()

    # ------------------------------------------------------------ workings

    def _guard(self, what: str, miss: T, fn: Callable[..., T], *args: Any) -> T:
        """Runs one data-path call: a miss when the host is unusable or
        anything fails, never an exception into SGLang.
        """
        if self.client is None or not self.health.usable():
            return miss
        try:
            out = fn(*args)
        except Exception as e:
            self.health.failed(what, e)
            return miss
        self.health.ok()
        return out

    def _resolve(
        self, keys: Sequence[str], extra_info: Any, *, write: bool = False
    ) -> tuple[Path, int] | None:
        """The tokens from the root through the last key, and the index of
        the first key's page among them; None when they are not known.
        Lookups and reads resolve in the lookup ledger (teaching the write
        ledger too), writes in the write ledger.
        """
        assert self.ledger is not None and self.write_ledger is not None
        ledger = self.write_ledger if write else self.ledger
        ledgers = [ledger]
        if not write and self.write_ledger is not self.ledger:
            ledgers.append(self.write_ledger)
        if not learn_from_caller(ledgers, keys, extra_info):
            self.counters["unknown_tokens"] += 1
            self._warn_once(
                "tokens",
                "kvpilot SGLang backend: the tokens of some pages are not known (a page whose "
                "prefix this worker never saw, or a backup without its prefix keys: set "
                f'"hicache_storage_pass_prefix_keys": true in {KEY_PREFIX}); those are misses',
            )
            return None
        path = ledger.path(keys[-1])
        if path is None:
            return None
        first = path.pages(ledger.page_size) - len(keys)
        return (path, first) if first >= 0 else None

    def _match(self, path: Path, end: int) -> MatchResult:
        assert self.client is not None and self.pages is not None
        return self.client.match(
            path.tokens[: end * self.pages.page_size],
            tenant=path.namespace.tenant,
            load_back_deadline_ms=self.settings.load_back_deadline_ms,
            timeout=self.settings.timeout_s,
        )

    def _release(self, request_id: str) -> None:
        assert self.client is not None
        self.client.release(request_id, timeout=self.settings.timeout_s)

    def _held(self, m: MatchResult, first: int, n: int) -> int:
        """How many of the n pages from ``first`` the match holds."""
        return max(0, min(n, m.cached_tokens // m.page_size - first))

    def _exists(self, keys: list[str], extra_info: Any) -> int:
        self.counters["exists_calls"] += 1
        r = self._resolve(keys, extra_info)
        if r is None:
            return 0
        path, first = r
        m = self._match(path, first + len(keys))
        try:
            hit = self._held(m, first, len(keys))
        finally:
            self._release(m.request_id)
        self.counters["hit_pages"] += hit
        return hit

    def _get(self, keys: list[str], host_indices: torch.Tensor, extra_info: Any) -> list[bool]:
        assert self.pages is not None
        r = self._resolve(keys, extra_info)
        if r is None:
            return [False] * len(keys)
        path, first = r
        m = self._match(path, first + len(keys))
        try:
            k = self._held(m, first, len(keys))
            if k:
                slots = torch.tensor(m.page_slots[first : first + k], dtype=torch.long)
                rows = self.pages.page_indices(host_indices, k)
                for layer, buf in self.pages.segments():
                    src = self._stage(layer, buf, m.generation).index_select(0, slots)
                    self.pages.view(layer, buf).index_copy_(0, rows, src)
        finally:
            self._release(m.request_id)
        self._count("got_pages", k, self._prefetch_pgs)
        return [True] * k + [False] * (len(keys) - k)

    def _get_flat(self, keys: list[str], targets: Any) -> list[torch.Tensor | None]:
        assert self.pages is not None
        r = self._resolve(keys, None)
        if r is None or targets is None:
            return [None] * len(keys)
        path, first = r
        m = self._match(path, first + len(keys))
        out: list[torch.Tensor | None] = [None] * len(keys)
        try:
            k = self._held(m, first, len(keys))
            for i in range(k):
                slot = m.page_slots[first + i]
                for layer, buf in self.pages.segments():
                    dst = self.pages.flat_segment(targets[i], layer, buf)
                    dst.copy_(self._stage(layer, buf, m.generation)[slot])
                out[i] = targets[i]
        finally:
            self._release(m.request_id)
        self._count("got_pages", k, self._prefetch_pgs)
        return out

    def _set(self, keys: list[str], host_indices: torch.Tensor, extra_info: Any) -> list[bool]:
        assert self.pages is not None
        pages = self.pages
        rows = pages.page_indices(host_indices, len(keys))

        def copy(slots: torch.Tensor, from_key: int, generation: int) -> None:
            for layer, buf in pages.segments():
                src = pages.view(layer, buf).index_select(0, rows[from_key:])
                self._stage(layer, buf, generation).index_copy_(0, slots, src)

        return self._store(keys, extra_info, copy)

    def _set_flat(self, keys: list[str], values: Any) -> list[bool]:
        assert self.pages is not None
        pages = self.pages
        if values is None or len(values) != len(keys):
            return [False] * len(keys)

        def copy(slots: torch.Tensor, from_key: int, generation: int) -> None:
            for j, slot in enumerate(slots.tolist()):
                for layer, buf in pages.segments():
                    src = pages.flat_segment(values[from_key + j], layer, buf)
                    self._stage(layer, buf, generation)[slot].copy_(src)

        return self._store(keys, None, copy)

    def _store(
        self,
        keys: list[str],
        extra_info: Any,
        copy: Callable[[torch.Tensor, int, int], None],
    ) -> list[bool]:
        """Commits the pages of ``keys`` kvpilot does not hold yet; ``copy``
        writes pages ``from_key..`` of the batch into staging slots.
        """
        assert self.client is not None and self.pages is not None
        n = len(keys)
        if not self.writer:
            # SGLang backs up from its storage writer only; a write reaching
            # another rank of an MLA engine would race the writer's pages.
            self._warn_once(
                "writer",
                f"kvpilot SGLang backend: rank tp{self.storage_config.tp_rank} is not SGLang's "
                "storage writer for this MLA model (rank 0 writes its replicated pages); it "
                "writes nothing",
            )
            return [False] * n
        r = self._resolve(keys, extra_info, write=True)
        if r is None:
            return [False] * n
        path, first = r
        end = first + n
        m = self._match(path, end)
        try:
            held = m.cached_tokens // m.page_size
            if held >= end:
                return [True] * n
            if held < first:
                # kvpilot lost the pages before these; its pages chain from
                # the root, so these cannot be stored until they come back.
                return [False] * n
            a = self.client.allocate(m.request_id, end - held, timeout=self.settings.timeout_s)
            slots = torch.tensor(a.page_slots, dtype=torch.long)
            copy(slots, held - first, m.generation)
            res = self.client.commit(
                m.request_id,
                path.tokens[: end * self.pages.page_size],
                m.page_slots[:held] + a.page_slots,
                timeout=self.settings.timeout_s,
            )
        finally:
            self._release(m.request_id)
        self.counters["stored_pages"] += res.stored
        self._count("set_pages", end - held, self._backup_pgs)
        return [True] * n

    def _stage(self, layer: int, buf: int, generation: int) -> torch.Tensor:
        """Kvpilot's staging ``[slots, page_size, heads, dim]`` of (layer,
        buf) as integers, for the registration the request ran under.
        """
        assert self.client is not None
        reg = self.client.registration
        if reg.generation != generation:
            raise HostRestarted("the kvpilot host restarted during the call")
        with self._staging_lock:
            if self._staging_reg != reg.id:
                self._staging = {}
                self._staging_reg = reg.id
            t = self._staging.get((layer, buf))
            if t is None:
                t = as_bits(self.client.device.tensor(layer, buf))
                self._staging[(layer, buf)] = t
            return t

    def _count(self, counter: str, pages: int, per_call: list[int]) -> None:
        self.counters[counter] += pages
        with self._stats_lock:
            per_call.append(pages)

    def _warn_once(self, what: str, msg: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(msg)


def _check_parallelism(cfg: HiCacheStorageConfig) -> None:
    """Refuses the parallel layouts whose pages no registration holds whole:
    one per K/V rank, or one shared by an MLA engine's ranks.
    """
    if cfg.attn_cp_size > 1 or cfg.dcp_size > 1:
        raise StorageConfigError(
            "kvpilot SGLang backend: context parallelism splits every page across ranks; run "
            "without --attn-cp-size/--dcp-size, or without the kvpilot backend"
        )
    if cfg.should_split_heads:
        raise StorageConfigError(
            "kvpilot SGLang backend: splitting heads across ranks of another TP size "
            "(tp_lcm_size with page_head) is not supported: unset tp_lcm_size"
        )
