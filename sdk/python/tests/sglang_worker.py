"""One SGLang worker's cache in a process of its own, with kvpilot as its L3.

Run by the SGLang tests with a Python that has SGLang::

    python sglang_worker.py '{"role": "produce", "socket": ..., "layout": ...}'

It builds SGLang's own ``UnifiedRadixCache`` with its ``HybridCacheController``
(SGLang's unified radix cache test kit, on CPU through tests/sglang_cpu.py),
attaches the kvpilot backend the way SGLang's server does
(``--hicache-storage-backend dynamic`` and its extra config), and then:

- ``produce``: inserts each sequence, writes K/V that are a function of the
  sequence into every layer, and lets SGLang back the pages up to host and
  L3 under the write policy (write_through: on insert; write_through_selective:
  on the second hit; write_back: on eviction);
- ``consume``: prefetches each sequence from L3 under the prefetch policy,
  loads what came back onto the device, and compares it with the K/V the
  producer wrote, byte for byte.

``"mla"`` builds an MLA model's cache (one fused latent row a token) instead
of K/V heads. With ``"tp_size"`` > 1 the process is one tensor-parallel rank
of a group of such processes (tests/sglang_support.py ``run_ranks``): they
run the same stages in step, as the ranks of SGLang's scheduler do, and
SGLang's cache controller reduces their storage hits across the group.

It prints one JSON object on stdout: per sequence, pages written or hit and
whether every byte served was right, and the backend's counters.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import logging
import sys
import time
import unittest
from array import array
from collections.abc import Callable
from typing import Any
from unittest import mock

import sglang_cpu
import torch
import torch.distributed as dist

# On a machine with a GPU, SGLang's own device code runs (pinned memory, its
# copy kernels): examples/sglang/gpu-check.sh.
if not torch.cuda.is_available():
    sglang_cpu.install()

from sglang.srt.environ import envs
from sglang.srt.mem_cache.base_prefix_cache import (
    CacheRequestHandle,
    EvictParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
from sglang.srt.runtime_context import get_parallel
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.test.kits.unified_radix_cache import fixtures
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang.test.kits.unified_radix_cache.fixtures import (
    build_fixture,
    drop_hicache_atexit_pin,
)
from sglang.test.kits.unified_radix_cache.storage import (
    UnifiedRadixCacheStorageFixtures,
)

# How long a rank waits for the others in one collective (a rank that
# crashed leaves the rest waiting this long, then failing).
_GROUP_TIMEOUT_S = 300


def expected_kv(
    tokens: list[int],
    ns: list[Any],
    layers: int,
    heads: int,
    dim: int,
    page_size: int,
    *,
    buffers: int = 2,
    shard: int | None = None,
) -> torch.Tensor:
    """The K/V a producer writes for a sequence: ``[layers, buffers, tokens,
    heads, dim]`` bf16 (K and V, or MLA's one fused row). Like a model's,
    each page's K/V depends on the tokens up to its end (and the namespace)
    only, so sequences sharing a prefix share its pages; ``shard`` (a
    tensor-parallel rank of K/V heads) gives each rank heads of its own, as
    a model's slice of the heads differs per rank, while MLA's rows are the
    same on every rank (no shard).
    """
    parts = []
    for start in range(0, len(tokens), page_size):
        end = min(start + page_size, len(tokens))
        what: list[Any] = [tokens[:end], ns] if shard is None else [tokens[:end], ns, shard]
        seed = hashlib.sha256(json.dumps(what).encode()).digest()
        g = torch.Generator().manual_seed(int.from_bytes(seed[:8], "little"))
        parts.append(torch.randn((layers, buffers, end - start, heads, dim), generator=g))
    return torch.cat(parts, dim=2).to(torch.bfloat16)


class Kit(UnifiedRadixCacheStorageFixtures, unittest.TestCase):
    """SGLang's fixture mixins, used outside a test runner."""

    def runTest(self) -> None:  # unittest wants one test method
        pass


class Worker:
    """One SGLang worker's cache: one rank of it when ``tp_size`` > 1 (each
    rank a process of a group; main sets the group up).

    ``mla`` (``{"kv_lora_rank": R, "rope_dim": D}``) builds an MLA model's
    cache instead of K/V heads: SGLang's ``MLATokenToKVPool`` on the device,
    so its host pool is the ``MLATokenToKVPoolHost`` SGLang builds for it.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.tp_rank = int(spec.get("tp_rank", 0))
        self.tp_size = int(spec.get("tp_size", 1))
        self.mla = spec.get("mla")
        self.buffers = 1 if self.mla else 2
        self.heads = 1 if self.mla else spec["heads"]
        self.head_dim = (
            self.mla["kv_lora_rank"] + self.mla["rope_dim"] if self.mla else spec["head_dim"]
        )
        # K/V ranks hold heads of their own; MLA rows are every rank's.
        self.shard = self.tp_rank if self.tp_size > 1 and not self.mla else None
        self.cfg = CacheConfig(
            page_size=spec["page_size"],
            components=(ComponentType.FULL,),
            num_layers=spec["layers"],
            full_attention_layer_ids=tuple(range(spec["layers"])),
            head_num=self.heads,
            head_dim=self.head_dim,
            kv_size=spec.get("kv_size", 512),
            max_context_len=spec.get("kv_size", 512),
        )
        self.kit = Kit()
        self.kit.cfg = self.cfg
        with contextlib.ExitStack() as patches:
            if self.mla:
                # The kit builds an MHA device pool; an MLA model's is this.
                patches.enter_context(
                    mock.patch.object(fixtures, "MHATokenToKVPool", self._mla_device_pool)
                )
            if self.tp_size > 1:
                # The scheduler hands the cache its TP ranks' CPU group.
                group = dist.new_group(list(range(self.tp_size)), backend="gloo")
                patches.enter_context(
                    mock.patch.object(
                        fixtures,
                        "CacheInitParams",
                        functools.partial(CacheInitParams, tp_cache_group=group),
                    )
                )
            self.cache, self.alloc, self.rtp = build_fixture(self.cfg)
        self._attach()

    def _mla_device_pool(self, **kw: Any) -> MLATokenToKVPool:
        assert self.mla is not None
        return MLATokenToKVPool(
            size=kw["size"],
            page_size=kw["page_size"],
            dtype=kw["dtype"],
            kv_lora_rank=self.mla["kv_lora_rank"],
            qk_rope_head_dim=self.mla["rope_dim"],
            layer_num=kw["layer_num"],
            device=kw["device"],
            enable_memory_saver=kw["enable_memory_saver"],
        )

    def _attach(self) -> None:
        spec = self.spec
        kit, cache = self.kit, self.cache
        # One rank without torch.distributed, as SGLang's own storage tests
        # force for their file backend; a rank of a group otherwise.
        # Plain tensor parallelism: attention and MoE span the TP ranks.
        ov = get_parallel().override(
            tp_rank=self.tp_rank,
            tp_size=self.tp_size,
            attn_tp_rank=self.tp_rank,
            attn_tp_size=self.tp_size,
            moe_tp_size=self.tp_size,
            pp_rank=0,
            pp_size=1,
        )
        ov.__enter__()
        kit.addCleanup(ov.__exit__, None, None, None)
        extra = {
            "backend_name": "kvpilot",
            "module_path": "kvpilot.sglang",
            "class_name": "KvpilotStorage",
            "interface_v1": spec.get("interface_v1", 1),
            "prefetch_threshold": 1,
            "hicache_storage_pass_prefix_keys": True,
            "socket": spec["socket"],
            "timeout_s": 5.0,
            "retry_after_s": 0.0,
            **spec.get("extra", {}),
        }
        args = ServerArgs(
            model_path="dummy",
            page_size=self.cfg.page_size,
            hicache_io_backend="kernel",
            hicache_mem_layout=spec.get("layout", "page_first"),
            hicache_write_policy=spec.get("write_policy", "write_through"),
            hicache_storage_backend="dynamic",
            hicache_storage_backend_extra_config=json.dumps(extra),
            hicache_storage_prefetch_policy=spec.get("prefetch_policy", "wait_complete"),
        )
        set_global_server_args_for_scheduler(args)
        cache.init_hicache(args, cache.cache_init_params)
        kit.addCleanup(drop_hicache_atexit_pin, cache)
        kit.addCleanup(cache.cache_controller._stop_storage_threads)
        cache.cache_controller.prefetch_capacity_limit = max(
            cache.cache_controller.prefetch_capacity_limit,
            cache.cache_controller.mem_pool_host.size,
        )
        self.backend = cache.cache_controller.storage_backend

    def _key(self, seq: dict[str, Any]) -> RadixKey:
        return RadixKey(
            array("q", seq["tokens"]),
            extra_key=seq.get("extra_key"),
            cache_salt=seq.get("cache_salt"),
        )

    def _ns(self, seq: dict[str, Any]) -> list[Any]:
        return [seq.get("extra_key"), seq.get("cache_salt")]

    def _insert(self, seq: dict[str, Any]) -> None:
        """A request's prefill entering the tree, as SGLang inserts it."""
        self.kit._insert(
            self.cache,
            self.alloc,
            self.rtp,
            seq["tokens"],
            extra_key=seq.get("extra_key"),
            cache_salt=seq.get("cache_salt"),
        )

    def _match(self, seq: dict[str, Any]) -> Any:
        return self.cache.match_prefix(MatchPrefixParams(key=self._key(seq)))

    # ------------------------------------------------------------ producer

    def _expected(self, seq: dict[str, Any]) -> torch.Tensor:
        cfg = self.cfg
        return expected_kv(
            seq["tokens"],
            self._ns(seq),
            cfg.num_layers,
            self.heads,
            self.head_dim,
            cfg.page_size,
            buffers=self.buffers,
            shard=self.shard,
        )

    def _device_buffers(self, layer: int) -> list[torch.Tensor]:
        """The device pool's K and V of a layer, or MLA's fused rows."""
        pool = self.kit._get_full_kv_pool(self.alloc)
        if self.mla:
            return [pool.get_key_buffer(layer)]
        return [pool.get_key_buffer(layer), pool.get_value_buffer(layer)]

    def _until(self, step: Callable[[], Any], done: Callable[[], bool], timeout: float) -> bool:
        """Runs ``step`` until ``done``; False past ``timeout``. The ranks of
        a group run it the same number of times, as every rank of SGLang's
        scheduler runs the same steps (``step`` enters SGLang's collectives):
        they agree each time on whether all are done.
        """
        deadline = time.time() + timeout
        while True:
            step()
            # [done, in time], then: every rank done, no rank late.
            flags = torch.tensor([int(done()), int(time.time() <= deadline)])
            if self.tp_size > 1:
                dist.all_reduce(flags, op=dist.ReduceOp.MIN)
            if flags[0]:
                return True
            if not flags[1]:
                return False
            time.sleep(0.01)

    def produce(self, seq: dict[str, Any]) -> dict[str, Any]:
        """Stores ``seq``: SGLang's lookup of it (skipped for ``"decoded":
        true``, tokens a worker generated itself and never looked up), its
        prefill into the tree with K/V written, and the backups the write
        policy makes.
        """
        kit, cache, cfg = self.kit, self.cache, self.cfg
        policy = self.spec.get("write_policy", "write_through")
        tokens = seq["tokens"]
        if not seq.get("decoded"):
            self._prefetch(seq, CacheRequestHandle(f"produce-{seq['name']}", 0))
        self._insert(seq)
        leaf = self._match(seq).last_device_node
        idx = cache.path_device_indices(leaf)
        kv = self._expected(seq)
        for layer in range(cfg.num_layers):
            for buf, dev in enumerate(self._device_buffers(layer)):
                dev[idx] = kv[layer, buf].to(dev.device)
        keys = kit._all_page_hashes(cache, leaf)
        if policy == "write_through_selective":
            # A second hit reaches the threshold of two.
            self._insert(seq)
        if policy == "write_back":
            cache.evict(EvictParams(num_tokens=len(tokens)))
        cache.writing_check(write_back=True)
        if self.tp_size == 1:
            kit._flush_l3_backups(cache, timeout=60.0)
        else:
            flushed = self._until(
                cache.drain_storage_control_queues,
                lambda: not kit._ongoing_l3_backups(cache),
                60.0,
            )
            assert flushed, "L3 backups did not complete in time"
        return {"keys": keys}

    # ------------------------------------------------------------ consumer

    def _prefetch(self, seq: dict[str, Any], rid: CacheRequestHandle) -> bool:
        """What SGLang's scheduler does for every new request: look its
        tokens up in L3 and prefetch what is there (``_prefetch_kvcache``);
        False when the prefetch did not finish. From the root, or with
        ``"anchored": true`` as the scheduler anchors it: after what the
        tree already holds, chained from that node's last key (a
        conversation's next turn).
        """
        cache, tokens = self.cache, seq["tokens"]
        anchor, matched, last_hash, prefix_keys = cache.root_node_handle(), 0, None, None
        if seq.get("anchored"):
            m = self._match(seq)
            anchor = m.last_host_node
            if not (cache.is_backuped(anchor) or cache.is_root(anchor)):
                return True  # the scheduler looks nothing up past an unsaved node
            matched = m.device_prefix_len + m.host_hit_length
            last_hash = cache.get_last_hash_value(anchor)
            if cache.hicache_storage_pass_prefix_keys:
                prefix_keys = cache.get_prefix_hash_values(anchor)
        cache.prefetch_from_storage(
            rid,
            anchor,
            array("q", tokens[matched:]),
            last_hash,
            prefix_keys,
            matched_prefix_tokens=list(tokens[:matched]),
            extra_key=seq.get("extra_key"),
            cache_salt=seq.get("cache_salt"),
        )
        if self.tp_size > 1:
            # The scheduler's loop on every rank, in step (wait_complete:
            # completion comes from the rank-MIN acknowledgements).
            assert cache.prefetch_stop_policy == "wait_complete", "ranks run wait_complete"
            state = {"done": False}

            def step() -> None:
                cache.check_hicache_events()
                state["done"] = state["done"] or cache.check_prefetch_progress(rid)

            return self._until(step, lambda: state["done"], 60.0)
        if rid in cache.ongoing_prefetch and cache.prefetch_stop_policy == "best_effort":
            # best_effort takes what arrived when the scheduler asks; a busy
            # scheduler asks after the transfer had time to run.
            op = cache.ongoing_prefetch[rid].operation
            deadline = time.time() + 10.0
            while (
                time.time() < deadline
                and rid in cache.ongoing_prefetch
                and not (
                    op.host_indices is not None
                    and op.completed_tokens >= len(op.hash_value) * self.cfg.page_size
                )
            ):
                cache.check_hicache_events()
                time.sleep(0.01)
        if rid in cache.ongoing_prefetch:
            deadline = time.time() + 60.0
            while not cache.check_prefetch_progress(rid):
                cache.check_hicache_events()
                if time.time() > deadline:
                    return False
                time.sleep(0.01)
        return True

    def loaded(self, seq: dict[str, Any]) -> torch.Tensor | None:
        """Prefetches ``seq`` from L3 as SGLang's scheduler does, loads what
        its tree then holds onto the device, and returns that K/V as SGLang's
        device pool holds it, ``[layers, buffers, tokens, heads, dim]``; None
        when the prefetch did not finish.
        """
        kit, cache, cfg = self.kit, self.cache, self.cfg
        if not self._prefetch(seq, CacheRequestHandle(f"consume-{seq['name']}", 0)):
            return None
        m = self._match(seq)
        if m.host_hit_length:
            kit._load_back_node(cache, m.best_match_node)
            m = self._match(seq)
        n = m.device_prefix_len
        shape = (cfg.num_layers, self.buffers, 0, self.heads, self.head_dim)
        if n == 0:
            return torch.empty(shape, dtype=torch.bfloat16)
        idx = cache.path_device_indices(m.last_device_node)[:n]
        return torch.stack(
            [
                torch.stack([b[idx] for b in self._device_buffers(i)]).cpu()
                for i in range(cfg.num_layers)
            ]
        )

    def consume(self, seq: dict[str, Any]) -> dict[str, Any]:
        cfg = self.cfg
        got = self.loaded(seq)
        if got is None:
            return {"hit_pages": -1, "error": "prefetch did not finish"}
        n = got.shape[2]
        want = self._expected(seq)[:, :, :n]
        wrong = int((got.view(torch.int16) != want.view(torch.int16)).sum())
        return {"hit_pages": n // cfg.page_size, "wrong_bytes": wrong}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            getattr(self.backend, "_backend", self.backend).close()
        self.kit.doCleanups()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_stage(spec: dict[str, Any]) -> dict[str, Any]:
    """Builds one cache (one SGLang worker's), runs its role over its
    sequences, closes it. ``random_delay`` and ``random_failure`` turn on
    SGLang's failure injection around this worker's backend.
    """
    with (
        envs.SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY.override(spec.get("random_delay")),
        envs.SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE.override(spec.get("random_failure")),
    ):
        w = Worker(spec)
    try:
        backend = getattr(w.backend, "_backend", w.backend)
        results = {}
        for s in spec["seqs"]:
            before = dict(backend.counters)
            # A sequence may take a role of its own in the stage's worker.
            results[s["name"]] = getattr(w, s.get("role", spec["role"]))(s)
            if spec.get("trace"):
                # What this sequence's calls did in the backend.
                results[s["name"]]["calls"] = {
                    k: v - before[k] for k, v in backend.counters.items()
                }
        return {"results": results, "counters": dict(backend.counters)}
    finally:
        w.close()


def main() -> None:
    """argv[1]: ``{"stages": [stage, ...], ...}``; each stage has the keys
    Worker and run_stage read, plus any the run gives all stages. With
    ``"tp_size"`` > 1 this process is rank ``"tp_rank"`` of a group that
    meets through the file ``"store"`` (a gloo group on CPU, as SGLang's
    cache controller syncs storage hits on gloo groups).
    """
    run = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    size = int(run.get("tp_size", 1))
    if size > 1:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{run['store']}",
            rank=int(run["tp_rank"]),
            world_size=size,
            timeout=datetime.timedelta(seconds=_GROUP_TIMEOUT_S),
        )
    common = {k: v for k, v in run.items() if k not in ("stages", "store")}
    print(json.dumps([run_stage({**common, **stage}) for stage in run["stages"]]))


if __name__ == "__main__":
    main()
