"""One SGLang worker's cache in a process of its own, with kvpilot as its L3.

Run by the SGLang tests with the SGLang venv's Python::

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

It prints one JSON object on stdout: per sequence, pages written or hit and
whether every byte served was right, and the backend's counters.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sys
import time
import unittest
from array import array
from typing import Any

import sglang_cpu
import torch

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
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
from sglang.srt.runtime_context import get_parallel
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang.test.kits.unified_radix_cache.fixtures import (
    build_fixture,
    drop_hicache_atexit_pin,
)
from sglang.test.kits.unified_radix_cache.storage import (
    UnifiedRadixCacheStorageFixtures,
)


def expected_kv(
    tokens: list[int], ns: list[Any], layers: int, heads: int, dim: int, page_size: int
) -> torch.Tensor:
    """The K/V a producer writes for a sequence: ``[layers, 2, tokens, heads,
    dim]`` bf16. Like a model's, each page's K/V depends on the tokens up to
    its end (and the namespace) only, so sequences sharing a prefix share
    its pages.
    """
    parts = []
    for start in range(0, len(tokens), page_size):
        end = min(start + page_size, len(tokens))
        seed = hashlib.sha256(json.dumps([tokens[:end], ns]).encode()).digest()
        g = torch.Generator().manual_seed(int.from_bytes(seed[:8], "little"))
        parts.append(torch.randn((layers, 2, end - start, heads, dim), generator=g))
    return torch.cat(parts, dim=2).to(torch.bfloat16)


class Kit(UnifiedRadixCacheStorageFixtures, unittest.TestCase):
    """SGLang's fixture mixins, used outside a test runner."""

    def runTest(self) -> None:  # unittest wants one test method
        pass


class Worker:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.cfg = CacheConfig(
            page_size=spec["page_size"],
            components=(ComponentType.FULL,),
            num_layers=spec["layers"],
            full_attention_layer_ids=tuple(range(spec["layers"])),
            head_num=spec["heads"],
            head_dim=spec["head_dim"],
            kv_size=spec.get("kv_size", 512),
            max_context_len=spec.get("kv_size", 512),
        )
        self.kit = Kit()
        self.kit.cfg = self.cfg
        self.cache, self.alloc, self.rtp = build_fixture(self.cfg)
        self._attach()

    def _attach(self) -> None:
        spec = self.spec
        kit, cache = self.kit, self.cache
        # No torch.distributed here: one rank, as SGLang's own storage tests
        # force for their file backend.
        ov = get_parallel().override(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1)
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

    def produce(self, seq: dict[str, Any]) -> dict[str, Any]:
        kit, cache, cfg = self.kit, self.cache, self.cfg
        policy = self.spec.get("write_policy", "write_through")
        tokens = seq["tokens"]
        self._prefetch(seq, CacheRequestHandle(f"produce-{seq['name']}", 0))
        self._insert(seq)
        leaf = self._match(seq).last_device_node
        idx = cache.path_device_indices(leaf)
        kv = expected_kv(
            tokens, self._ns(seq), cfg.num_layers, cfg.head_num, cfg.head_dim, cfg.page_size
        )
        pool = kit._get_full_kv_pool(self.alloc)
        kv = kv.to(pool.get_key_buffer(0).device)
        for layer in range(cfg.num_layers):
            pool.get_key_buffer(layer)[idx] = kv[layer, 0]
            pool.get_value_buffer(layer)[idx] = kv[layer, 1]
        keys = kit._all_page_hashes(cache, leaf)
        if policy == "write_through_selective":
            # A second hit reaches the threshold of two.
            self._insert(seq)
        if policy == "write_back":
            cache.evict(EvictParams(num_tokens=len(tokens)))
        cache.writing_check(write_back=True)
        kit._flush_l3_backups(cache, timeout=60.0)
        return {"keys": keys}

    # ------------------------------------------------------------ consumer

    def _prefetch(self, seq: dict[str, Any], rid: CacheRequestHandle) -> bool:
        """What SGLang's scheduler does for every new request: look its
        tokens up in L3 and prefetch what is there (``_prefetch_kvcache``);
        False when the prefetch did not finish.
        """
        cache, tokens = self.cache, seq["tokens"]
        cache.prefetch_from_storage(
            rid,
            cache.root_node_handle(),
            array("q", tokens),
            None,
            None,
            extra_key=seq.get("extra_key"),
            cache_salt=seq.get("cache_salt"),
        )
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
        device pool holds it, ``[layers, 2, tokens, heads, dim]``; None when
        the prefetch did not finish.
        """
        kit, cache, cfg = self.kit, self.cache, self.cfg
        if not self._prefetch(seq, CacheRequestHandle(f"consume-{seq['name']}", 0)):
            return None
        m = self._match(seq)
        if m.host_hit_length:
            kit._load_back_node(cache, m.best_match_node)
            m = self._match(seq)
        n = m.device_prefix_len
        shape = (cfg.num_layers, 2, 0, cfg.head_num, cfg.head_dim)
        if n == 0:
            return torch.empty(shape, dtype=torch.bfloat16)
        idx = cache.path_device_indices(m.last_device_node)[:n]
        pool = kit._get_full_kv_pool(self.alloc)
        return torch.stack(
            [
                torch.stack([pool.get_key_buffer(i)[idx], pool.get_value_buffer(i)[idx]]).cpu()
                for i in range(cfg.num_layers)
            ]
        )

    def consume(self, seq: dict[str, Any]) -> dict[str, Any]:
        cfg = self.cfg
        got = self.loaded(seq)
        if got is None:
            return {"hit_pages": -1, "error": "prefetch did not finish"}
        n = got.shape[2]
        want = expected_kv(
            seq["tokens"], self._ns(seq), cfg.num_layers, cfg.head_num, cfg.head_dim, cfg.page_size
        )[:, :, :n]
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
        role = getattr(w, spec["role"])
        results = {s["name"]: role(s) for s in spec["seqs"]}
        backend = getattr(w.backend, "_backend", w.backend)
        return {"results": results, "counters": dict(backend.counters)}
    finally:
        w.close()


def main() -> None:
    """argv[1]: ``{"stages": [stage, ...], ...}``; each stage has the keys
    Worker and run_stage read, plus any the run gives all stages.
    """
    run = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    common = {k: v for k, v in run.items() if k != "stages"}
    print(json.dumps([run_stage({**common, **stage}) for stage in run["stages"]]))


if __name__ == "__main__":
    main()
