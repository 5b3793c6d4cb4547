"""kvpilot.dynamo.host_environment without Dynamo installed: a stand-in
endpoint has the one method it calls (connection_id)."""

from __future__ import annotations

import subprocess

import pytest

from kvpilot.dynamo import host_environment, parse_endpoint_path


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
