"""kvpilot.dynamo without Dynamo installed: host_environment with a
stand-in endpoint (it only calls connection_id), the TTL clamp, and the
cache_control handler driven directly against a real host."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from kvpilot.dynamo import (
    NVEXT_TTL_RANGE,
    cache_control_handler,
    clamp_ttl,
    host_environment,
    parse_endpoint_path,
)


class FakeEndpoint:
    def connection_id(self) -> int:
        return 2769957934671139


def test_host_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYN_DISCOVERY_BACKEND", "file")
    monkeypatch.setenv("DYN_FILE_KV", "/tmp/dyn-kv")
    env = host_environment(FakeEndpoint(), "dyn://ns1.comp1.gen", dp_rank=2)
    assert env == {
        "KVPILOT_WORKER_ID": "2769957934671139",
        "KVPILOT_EVENTS__DP_RANK": "2",
        "KVPILOT_EVENTS__FORMAT": "dynamo",
        "KVPILOT_EVENTS__NAMESPACE": "ns1",
        "KVPILOT_EVENTS__COMPONENT": "comp1",
        "KVPILOT_EVENTS__ENDPOINT": "gen",
        "KVPILOT_EVENTS__DYNAMO_FILE_KV": "/tmp/dyn-kv",
    }
    monkeypatch.setenv("DYN_DISCOVERY_BACKEND", "etcd")
    assert "KVPILOT_EVENTS__DYNAMO_FILE_KV" not in host_environment(FakeEndpoint(), "a.b.c")


def test_host_accepts_the_variables(kvpilot_binary: str, tmp_path) -> None:
    """The host's strict configuration loader takes every variable (`kvpilot
    ctl` loads the configuration as `serve` does, then finds no host)."""
    env = host_environment(FakeEndpoint(), "ns1.comp1.gen", dp_rank=1, file_kv=str(tmp_path))

    def ctl(extra: dict[str, str]) -> str:
        base = {"PATH": "/usr/bin:/bin", "KVPILOT_DATA_DIR": str(tmp_path / "data")}
        res = subprocess.run(
            [kvpilot_binary, "ctl", "stats"], capture_output=True, text=True, env={**base, **extra}
        )
        assert res.returncode != 0  # no host runs there
        return res.stderr

    assert "invalid configuration" not in ctl(env)
    assert "invalid configuration" in ctl({**env, "KVPILOT_EVENTS__FORMAT": "bogus"})


@pytest.mark.parametrize("bad", ["a.b", "a..c", "a.b.c.d", ""])
def test_bad_endpoint_path(bad: str) -> None:
    with pytest.raises(ValueError, match=r"namespace\.component\.endpoint"):
        parse_endpoint_path(bad)


@pytest.mark.parametrize(
    ("value", "want", "warned"),
    [
        (None, None, False),
        (600, 600.0, False),
        ("10m", 600.0, False),
        (10, 300.0, True),
        ("2h", 3600.0, True),
        ("2d", 300.0, True),
        ("soon", 300.0, True),
        (-5, 300.0, True),
        ({"x": 1}, 300.0, True),
    ],
)
def test_clamp_ttl(value: object, want: float | None, warned: bool) -> None:
    secs, warning = clamp_ttl(value, *NVEXT_TTL_RANGE)
    assert secs == want and bool(warning) == warned, (secs, warning)


def _ask(handler: object, req: object) -> dict:
    async def run() -> list[dict]:
        return [r async for r in handler(req)]  # type: ignore[operator]

    out = asyncio.run(run())
    assert len(out) == 1
    return out[0]


def test_handler_ttl_semantics(kvpilot_host) -> None:
    """With the nvext range a bad TTL never fails the request: it pins with
    the default and says so; without it the host's rules refuse it."""
    from kvpilot import EngineClient, Layout

    page = 16
    layout = Layout.mha("dyn-ttl", page_size=page, dtype="fp16", layers=1, kv_heads=1, head_dim=8)
    tokens = list(range(50_000, 50_000 + 2 * page))
    with EngineClient(kvpilot_host.engine_socket, layout) as c:
        m = c.match(tokens, session="ttl")
        a = c.allocate(m.request_id, 2 - len(m.page_slots))
        c.commit(m.request_id, tokens, m.page_slots + a.page_slots)
        c.finish(m.request_id)
    clamped = cache_control_handler(
        kvpilot_host.control_socket, worker_id=7, ttl_range=NVEXT_TTL_RANGE
    )
    r = _ask(clamped, {"action": "pin_prefix", "token_ids": tokens, "ttl_seconds": "2d"})
    assert r["status"] == "ok" and r["pinned_count"] == 2 and "default 300s" in r["warning"], r
    assert r["worker_id"] == "7"
    r = _ask(clamped, {"action": "pin_prefix", "token_ids": tokens, "ttl_seconds": 7200})
    assert r["status"] == "ok" and "used 3600s" in r["warning"], r
    plain = cache_control_handler(kvpilot_host.control_socket)
    r = _ask(plain, {"action": "pin_prefix", "token_ids": tokens, "ttl_seconds": "2d"})
    assert r["status"] == "error" and r["code"] == "invalid_ttl", r
    r = _ask(plain, {"action": "pin_prefix", "token_ids": tokens, "ttl_seconds": 600})
    assert r["status"] == "ok" and "warning" not in r, r
