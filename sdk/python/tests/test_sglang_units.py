"""The kvpilot SGLang backend's rules: settings, tenants, the key ledger, what
attaching refuses, the generic (non-v1) calls, and a host that goes away.

SGLang's own cache code runs in this process here (tests/sglang_worker.py's
Worker, on CPU through tests/sglang_cpu.py) against a real kvpilot host.
Run by ``make test-sglang``; skipped without SGLang.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here: make test-sglang runs this")

import sglang_worker
from sglang.srt.mem_cache.utils import get_hash_str
from sglang_support import seq

from kvpilot.sglang import StorageConfigError, StorageSettings
from kvpilot.sglang.ledger import HASHED_TENANT_PREFIX, Ledger, Namespace

PAGE = 16
GEOMETRY = {"page_size": PAGE, "layers": 2, "heads": 2, "head_dim": 8, "kv_size": 512}
RANKS = {"tp_rank": 1, "pp_rank": 0, "dp_rank": 2}

# ---------------------------------------------------------------- settings


def test_settings_fill_the_socket_per_rank() -> None:
    s = StorageSettings.from_extra_config(
        {"backend_name": "kvpilot", "interface_v1": 1, "socket": "/run/kvp-{tp_rank}/e.sock"},
        RANKS,
    )
    assert s.socket == "/run/kvp-1/e.sock"
    assert s.timeout_s == 2.0 and s.rope_theta == 0


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ({}, "'socket' is not set"),
        ({"socket": "/s", "sockett": 1}, "'sockett'"),
        ({"socket": "/s", "timeout_s": "2"}, "timeout_s = '2'"),
        ({"socket": "/s", "reset_cache": 1}, "reset_cache = 1"),
        ({"socket": "/s", "rope_style": "neox"}, "rope_style = 'neox'"),
        ({"socket": "/s-{rank}"}, "{tp_rank}"),
    ],
)
def test_bad_settings_name_the_key(extra: dict[str, Any], names: str) -> None:
    with pytest.raises(StorageConfigError, match="--hicache-storage-backend-extra-config") as e:
        StorageSettings.from_extra_config(extra, RANKS)
    assert names in str(e.value)


# ----------------------------------------------------------------- tenants


def test_namespaces_map_to_distinct_tenants() -> None:
    assert Namespace().tenant == ""
    assert Namespace(cache_salt="acme").tenant == "acme"
    lora = Namespace(extra_key="lora-1", cache_salt="acme").tenant
    assert lora.startswith(HASHED_TENANT_PREFIX) and lora != "acme"
    assert Namespace(extra_key="lora-2", cache_salt="acme").tenant != lora
    # A salt that looks like a hashed tenant is hashed too: no collisions.
    forged = Namespace(cache_salt=lora).tenant
    assert forged != lora and forged.startswith(HASHED_TENANT_PREFIX)
    assert Namespace(cache_salt="x\n").tenant.startswith(HASHED_TENANT_PREFIX)


# ------------------------------------------------------------------ ledger


def test_ledger_believes_only_tokens_that_hash_to_the_keys() -> None:
    toks = list(range(3 * PAGE))
    ns = Namespace(cache_salt="acme")
    keys = get_hash_str(toks, ns.seed, page_size=PAGE)
    led = Ledger(PAGE, capacity=100)
    # Wrong tokens for the second page: only the first is entered.
    bad = toks[:PAGE] + [7] * PAGE
    assert led.learn(None, bad, keys, ns) == 1
    assert led.path(keys[1]) is None
    # The wrong namespace enters nothing.
    assert led.learn(None, toks, keys, Namespace()) == 0
    assert led.learn(None, toks, keys, ns) == 3
    p = led.path(keys[2])
    assert p is not None and p.tokens == toks and p.namespace == ns
    # A continuation chains from its prior and inherits its namespace.
    more = list(range(1000, 1000 + PAGE))
    k4 = get_hash_str(more, keys[2], page_size=PAGE)
    assert led.learn(keys[2], more, k4, Namespace()) == 1
    p4 = led.path(k4[0])
    assert p4 is not None and p4.tokens == toks + more and p4.namespace == ns


def test_ledger_keeps_the_newest_keys() -> None:
    led = Ledger(PAGE, capacity=2)
    toks = list(range(3 * PAGE))
    keys = get_hash_str(toks, None, page_size=PAGE)
    assert led.learn(None, toks, keys, Namespace()) == 3
    assert len(led) == 2
    assert led.path(keys[2]) is None  # its root page was dropped


# -------------------------------------------------------- SGLang in-process


def _worker(host_socket: str, **spec: Any) -> sglang_worker.Worker:
    return sglang_worker.Worker({"socket": host_socket, **GEOMETRY, **spec})


def test_attach_refuses_a_layout_it_cannot_serve(kvpilot_host: Any) -> None:
    with pytest.raises(StorageConfigError, match="--hicache-mem-layout page_unified") as e:
        _worker(kvpilot_host.engine_socket, layout="page_unified")
    assert "layer_first, page_first, page_first_direct, page_head" in str(e.value)


MLA = {"kv_lora_rank": 16, "rope_dim": 8}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        # SGLang's MLA pool has this layout, but describes no pages in it.
        ({"layout": "page_unified"}, "one of layer_first, page_first, page_first_direct"),
        # The rotated part of an MLA row is its qk_rope_head_dim, no other.
        ({"extra": {"rope_theta": 1e4, "rope_dim": 4}}, "rotates the last 8 elements"),
    ],
)
def test_mla_attach_refuses_what_its_rows_cannot_be(
    kvpilot_host: Any, spec: dict[str, Any], says: str
) -> None:
    with pytest.raises(StorageConfigError, match=says):
        _worker(kvpilot_host.engine_socket, mla=MLA, **spec)


def test_an_mla_rank_that_is_not_the_writer_never_writes(
    kvpilot_host: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """SGLang backs an MLA pool up from rank 0 only; a write that reached
    another rank anyway is refused by the backend, saying why, and nothing
    reaches the host."""
    from kvpilot.sglang import KvpilotStorage

    w = _worker(kvpilot_host.engine_socket, mla=MLA)
    try:
        group = w.cache.cache_controller.mem_pool_host
        rows = group.alloc(2 * PAGE)
        pool = group.anchor_entry.host_pool
        extra = {"backend_name": "kvpilot", "socket": kvpilot_host.engine_socket}
        other = KvpilotStorage(
            _storage_config(is_mla_model=True, tp_rank=1, extra_config=extra), {}
        )
        other.register_mem_pool_host(pool)
        try:
            keys = [f"{i:064x}" for i in range(2)]
            with caplog.at_level("WARNING", logger="sglang.kvpilot"):
                assert other.batch_set_v1(keys, rows) == [False, False]
                assert not other.batch_set(keys, [pool.get_data_page(0)] * 2)
            assert "is not SGLang's storage writer" in caplog.text
            assert other.counters["set_pages"] == 0
            assert other.client is not None and other.client.layout.buffers[0].name == "kv"
        finally:
            other.close()
    finally:
        w.close()


def test_attach_refuses_a_socket_without_a_host(tmp_path: Any) -> None:
    with pytest.raises(StorageConfigError, match="no kvpilot host at socket="):
        _worker(str(tmp_path / "none.sock"))


def test_generic_calls_interoperate_with_v1(kvpilot_host: Any) -> None:
    """Without interface_v1 SGLang moves pages through get/set in its flat
    page format; those pages and the v1 calls' are the same pages."""
    sock = kvpilot_host.engine_socket
    generic = seq("generic", 3000, 3, PAGE)
    v1 = seq("v1", 4000, 2, PAGE)
    results = {}
    for spec, role, s in [
        ({"interface_v1": 0, "layout": "page_first"}, "produce", generic),
        ({"interface_v1": 1, "layout": "layer_first"}, "produce", v1),
        ({"interface_v1": 1, "layout": "page_head"}, "consume", generic),
        ({"interface_v1": 0, "layout": "layer_first"}, "consume", v1),
        ({"interface_v1": 0, "layout": "page_first_direct"}, "consume", generic),
    ]:
        w = _worker(sock, role=role, **spec)
        try:
            results[(role, s["name"], spec["layout"])] = getattr(w, role)(s)
        finally:
            w.close()
    for (role, name, layout), r in results.items():
        if role == "consume":
            want = {"hit_pages": 3 if name == "generic" else 2, "wrong_bytes": 0}
            assert r == want, (name, layout, r)


def test_a_host_that_goes_away_is_a_miss(kvpilot_host: Any) -> None:
    """Stopping the host under an attached worker: lookups, reads and writes
    are misses within the call timeout, never an exception into SGLang, and
    the backend leaves the host alone meanwhile."""
    sock = kvpilot_host.engine_socket
    s = seq("gone", 6000, 2, PAGE)
    producer = _worker(sock)
    try:
        producer.produce(s)
    finally:
        producer.close()
    w = _worker(sock, extra={"timeout_s": 1.0, "retry_after_s": 30.0})
    try:
        kvpilot_host.stop()
        backend = w.backend
        start = time.monotonic()
        assert w.consume(s) == {"hit_pages": 0, "wrong_bytes": 0}
        assert w.produce(seq("gone2", 8000, 2, PAGE))["keys"]
        assert time.monotonic() - start < 60
        assert backend.health.failures["down"] >= 1
        keys = [f"{i:064x}" for i in range(2)]
        assert backend.batch_exists(keys) == 0
        rows = w.cache.cache_controller.mem_pool_host.alloc(2 * PAGE)
        assert backend.batch_set_v1(keys, rows) == [False, False]
        assert backend.batch_get_v1(keys, rows) == [False, False]
    finally:
        w.close()


def test_pause_and_warm_reach_sglang_pages(kvpilot_host: Any) -> None:
    """Pages an SGLang worker wrote are kvpilot's to steer by their block
    hashes: a pause moves them out of kvpilot's memory tiers onto disk under
    a lease, a fresh SGLang worker's prefetch still finds them (loaded back,
    byte for byte), and a warm brings them back into the host tier."""
    import json
    import subprocess

    from kvpilot import ControlClient
    from kvpilot import directives as d

    s = seq("paused", 12_000, 3, PAGE)
    out = subprocess.run(
        [kvpilot_host.binary, "hash", "--block-size", str(PAGE), *map(str, s["tokens"])],
        capture_output=True,
        text=True,
        check=True,
    )
    hashes = json.loads(out.stdout)["sequence"]
    producer = _worker(kvpilot_host.engine_socket)
    try:
        producer.produce(s)
    finally:
        producer.close()
    with ControlClient(kvpilot_host.control_socket) as ctl:
        r = ctl.apply([d.pause(hashes, ttl="10m", lease_id="sglang-paused")])
        assert r.results[0].effect.blocks == 3, r
        # The mover copies to disk behind the reply, and the memory copies
        # are dropped only once the disk copy is done: wait for both.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            tiers = ctl.stats().tiers
            moved = tiers["host"].pages == 0 and tiers["device"].pages == 0
            if tiers["disk"].leased_pages >= 3 and moved:
                break
            time.sleep(0.1)
        assert tiers["disk"].leased_pages == 3, tiers
        assert tiers["host"].pages == 0 and tiers["device"].pages == 0, tiers
    consumer = _worker(kvpilot_host.engine_socket, layout="layer_first")
    try:
        assert consumer.consume(s) == {"hit_pages": 3, "wrong_bytes": 0}
    finally:
        consumer.close()
    with ControlClient(kvpilot_host.control_socket) as ctl:
        r = ctl.apply([d.warm(hashes, target_tier="host")])
        assert r.ok, r
        assert ctl.stats().tiers["host"].pages >= 3


def _storage_config(**over: Any) -> Any:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    fields = {
        "tp_rank": 1,
        "tp_size": 2,
        "pp_rank": 0,
        "pp_size": 1,
        "attn_cp_rank": 0,
        "attn_cp_size": 1,
        "is_mla_model": False,
        "enable_storage_metrics": True,
        "is_page_first_layout": True,
        "model_name": "m",
        "extra_config": {"backend_name": "kvpilot", "socket": "/run/kvp-{tp_rank}.sock"},
    }
    return HiCacheStorageConfig(**{**fields, **over})


def test_storage_config_fields() -> None:
    """SGLang's HiCacheStorageConfig as its controller fills it: tp_lcm_size
    None (the default) and the rank fields are taken; an MLA model's ranks
    all use the writer's (rank 0's) host, and only rank 0 writes; what no
    registration holds whole is refused, naming it."""
    from kvpilot.sglang import KvpilotStorage

    b = KvpilotStorage(_storage_config(tp_lcm_size=None), {})
    assert b.settings.socket == "/run/kvp-1.sock"
    assert b.writer and not b.replicated
    assert b.get_stats().backup_pgs == [] and b.batch_exists(["00"]) == 0
    mla = KvpilotStorage(_storage_config(is_mla_model=True), {})
    assert mla.settings.socket == "/run/kvp-0.sock"
    assert mla.replicated and not mla.writer
    assert KvpilotStorage(_storage_config(is_mla_model=True, tp_rank=0), {}).writer
    for over, says in [
        ({"attn_cp_size": 2}, "context parallelism"),
        ({"should_split_heads": True, "tp_lcm_size": 4}, "tp_lcm_size"),
    ]:
        with pytest.raises(StorageConfigError, match=says):
            KvpilotStorage(_storage_config(**over), {})


@pytest.mark.parametrize("pass_prefix_keys", [True, False])
def test_a_second_turn_chains_from_the_first(kvpilot_host: Any, pass_prefix_keys: bool) -> None:
    """A conversation's second turn extends the first: SGLang backs up the
    new node alone (its tokens, and the keys before it when
    hicache_storage_pass_prefix_keys is on); kvpilot commits it after the
    first turn's pages, and a fresh worker prefetches both turns. Without
    the prefix keys the chain is still known, from the lookup SGLang makes
    for every request before it prefills."""
    extra = {"hicache_storage_pass_prefix_keys": pass_prefix_keys}
    first = seq("turn1", 20_000, 3, PAGE, cache_salt="acme")
    second = {
        "name": "turn2",
        "tokens": first["tokens"] + list(range(30_000, 30_000 + 2 * PAGE)),
        "cache_salt": "acme",
    }
    producer = _worker(kvpilot_host.engine_socket, extra=extra)
    try:
        producer.produce(first)
        producer.produce(second)
        assert producer.backend.counters["stored_pages"] == 5
        assert producer.backend.counters["unknown_tokens"] == 0
    finally:
        producer.close()
    consumer = _worker(kvpilot_host.engine_socket, layout="page_head", extra=extra)
    try:
        assert consumer.consume(second) == {"hit_pages": 5, "wrong_bytes": 0}
    finally:
        consumer.close()
