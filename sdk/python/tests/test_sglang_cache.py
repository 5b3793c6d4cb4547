"""SGLang's own HiCache with kvpilot as its L3 tier, across worker processes.

Each SGLang worker is SGLang 0.5.23's ``UnifiedRadixCache`` with its
``HybridCacheController`` and storage threads (its unified radix cache test
kit, on CPU: tests/sglang_cpu.py names the four things replaced and why),
with the kvpilot backend attached as SGLang's server attaches it
(``--hicache-storage-backend dynamic``, ``interface_v1``). Producers and
consumers run in separate processes (tests/sglang_worker.py) against one
real kvpilot host; nothing of kvpilot is replaced.

Run by ``make test-sglang``; skipped where SGLang is not installed.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here: make test-sglang runs this")

from sglang_support import run_worker, seq

from kvpilot.engine import EngineClient
from kvpilot.layout import Buffer, Layout, RopeConfig, RopeSlice

PAGE = 16
GEOMETRY = {"page_size": PAGE, "layers": 2, "heads": 2, "head_dim": 8, "kv_size": 512}
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
PREFETCH_POLICIES = ("wait_complete", "timeout", "best_effort")
INJECT = {"random_delay": 0.02, "random_failure": 0.2}


def _run(host: Any, stages: list[dict[str, Any]], **common: Any) -> list[dict[str, Any]]:
    return run_worker({"socket": host.engine_socket, **GEOMETRY, **common, "stages": stages})


def test_pages_cross_workers_in_every_layout_and_policy(kvpilot_host: Any) -> None:
    """A producer process writes a sequence under each layout and write
    policy; a consumer process prefetches every one under each layout and
    prefetch policy and loads it onto its device: byte-identical K/V, all
    pages for wait_complete and timeout (best_effort may stop early, but
    what it serves is right). Pages of one cache_salt never serve another
    salt, nor a request without one.

    The same two processes then run workers with SGLang's own random delay
    and failure injection around the backend
    (SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY/_RANDOM_FAILURE), on both
    sides: no wrong byte is ever served; a failed write is a page the
    consumer misses, a failed lookup or read is a miss.
    """
    written = []
    stages = []
    for i, layout in enumerate(LAYOUTS):
        for j, policy in enumerate(WRITE_POLICIES):
            s = seq(f"{layout}/{policy}", 1000 * (3 * i + j + 1), 3, PAGE)
            written.append(s)
            stages.append(
                {"role": "produce", "layout": layout, "write_policy": policy, "seqs": [s]}
            )
    salted = seq("acme", 50_000, 3, PAGE, cache_salt="acme")
    stages.append({"role": "produce", "layout": "page_first", "seqs": [salted]})
    injected = [seq(f"injected{i}", 100_000 + 1000 * i, 3, PAGE) for i in range(8)]
    stages.append({"role": "produce", "layout": "page_first", "seqs": injected, **INJECT})
    produced = _run(kvpilot_host, stages)
    stored = sum(p["counters"]["stored_pages"] for p in produced[:-1])
    assert stored == 3 * len(written) + 3, produced

    other_salt = {**salted, "name": "globex", "cache_salt": "globex"}
    no_salt = {k: v for k, v in salted.items() if k != "cache_salt"}
    no_salt["name"] = "unsalted"
    reads = [*written, salted, other_salt, no_salt]
    stages = [
        {"role": "consume", "layout": layout, "prefetch_policy": policy, "seqs": reads}
        for layout in LAYOUTS
        for policy in PREFETCH_POLICIES
    ]
    stages += [
        {"role": "consume", "layout": layout, "seqs": injected, **INJECT}
        for layout in ("layer_first", "page_first")
    ]
    consumed = _run(kvpilot_host, stages)
    for out in consumed:
        for name, r in out["results"].items():
            assert r["wrong_bytes"] == 0, (name, r)

    best_effort_hits = 0
    for stage, out in zip(stages[:-2], consumed[:-2], strict=True):
        res = out["results"]
        for s in [*written, salted]:
            if stage["prefetch_policy"] == "best_effort":
                best_effort_hits += res[s["name"]]["hit_pages"]
            else:
                assert res[s["name"]]["hit_pages"] == 3, (stage, s["name"], res[s["name"]])
        assert res["globex"]["hit_pages"] == 0, res["globex"]
        assert res["unsalted"]["hit_pages"] == 0, res["unsalted"]
    assert best_effort_hits > 0

    hits = [r["hit_pages"] for out in consumed[-2:] for r in out["results"].values()]
    assert 0 < sum(hits) < 3 * len(hits), hits


MLA = {"kv_lora_rank": 16, "rope_dim": 8}
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")


def test_mla_pages_cross_workers_in_every_layout(kvpilot_host: Any) -> None:
    """An MLA model's cache (SGLang's MLATokenToKVPool, so its host pool is
    SGLang's MLATokenToKVPoolHost): a producer process writes latent rows
    (kv_c then k_pe, one head a token) under each layout SGLang's MLA pool
    has, through the v1 and the generic calls; a consumer process with fresh
    pools prefetches every one under each layout and loads it onto its
    device, bit for bit. The host holds one fused buffer per layer, the
    rotated part after the latent, paired adjacent as DeepSeek rotates.
    """
    written, stages = [], []
    for i, layout in enumerate(MLA_LAYOUTS):
        for v1 in (1, 0):
            s = seq(f"mla/{layout}/v{v1}", 200_000 + 1000 * (2 * i + v1), 3, PAGE)
            written.append(s)
            stages.append({"role": "produce", "layout": layout, "interface_v1": v1, "seqs": [s]})
    extra = {"rope_theta": 10000.0, "model": "mla-test"}
    produced = _run(kvpilot_host, stages, mla=MLA, extra=extra)
    assert sum(p["counters"]["stored_pages"] for p in produced) == 3 * len(written), produced
    stages = [
        {"role": "consume", "layout": layout, "interface_v1": v1, "seqs": written}
        for layout in MLA_LAYOUTS
        for v1 in (1, 0)
    ]
    for stage, out in zip(stages, _run(kvpilot_host, stages, mla=MLA, extra=extra), strict=True):
        for name, r in out["results"].items():
            assert r == {"hit_pages": 3, "wrong_bytes": 0}, (stage, name, r)
    # The workers' registration is still the host's: a process naming the
    # same engine, layout and RoPE joins it, so that is what they registered.
    rope = RopeSlice(0, MLA["kv_lora_rank"], MLA["rope_dim"], "interleaved")
    layout = Layout("mla-test", PAGE, "bf16", 2, (Buffer("kv", 1, 24),), rope)
    with EngineClient(
        kvpilot_host.engine_socket,
        layout,
        RopeConfig(base=10000.0),
        engine_id="sglang:mla-test:mla-tp1:pp0:dp0",
        mode="connector",
    ) as probe:
        assert probe.registration.joined, probe.registration
