"""ControlClient against a real `kvpilot serve`: cache_control, apply, stats,
events."""

from __future__ import annotations

import threading
import time

import pytest

from kvpilot import ControlClient, EngineClient, Layout
from kvpilot import directives as d
from kvpilot.errors import KvpilotError, NotFoundError, Unavailable, UnknownBlock, UnknownLease

PAGE = 16
LAYOUT = Layout.mha("py-test", page_size=PAGE, dtype="fp16", layers=1, kv_heads=1, head_dim=8)


def commit_prefix(c: EngineClient, tokens: list[int], session: str) -> list[int]:
    m = c.match(tokens, session=session)
    a = c.allocate(m.request_id, len(tokens) // PAGE - len(m.page_slots))
    r = c.commit(m.request_id, tokens, m.page_slots + a.page_slots)
    c.finish(m.request_id)
    return r.block_hashes


def test_pin_prefix_shows_in_stats(kvpilot_host) -> None:
    tokens = list(range(1, 1 + 3 * PAGE))
    with (
        EngineClient(kvpilot_host.engine_socket, LAYOUT) as c,
        ControlClient(kvpilot_host.control_socket, source="py-test") as ctl,
    ):
        hashes = commit_prefix(c, tokens, "pinned")
        before = ctl.stats()
        assert ctl.ping() == before.worker_id
        assert before.page_size_tokens == PAGE
        assert before.tiers["device"].pages == 3 and before.tiers["device"].pinned_pages == 0

        r = ctl.cache_control("pin_prefix", token_ids=tokens, ttl_seconds="10m")
        assert r.ok and r.count_field == "pinned_count" and r.count == 3 and r.total_blocks == 3
        assert r.to_dict()["pinned_count"] == 3
        stats = ctl.stats()
        st = stats.tiers["device"]
        assert st.pinned_pages == 3 and st.pinned_bytes == 3 * LAYOUT.page_bytes()
        assert stats.pins >= 1 and not stats.restore_pending and stats.degraded_leases == {}

        r = ctl.cache_control("unpin_blocks", block_hashes=hashes)
        assert r.ok and r.count == 3
        assert ctl.stats().tiers["device"].pinned_pages == 0


def test_cache_control_error_reply(kvpilot_host) -> None:
    with ControlClient(kvpilot_host.control_socket) as ctl:
        with pytest.raises(KvpilotError) as e:
            ctl.cache_control("pin_everything", block_hashes=[1])
        assert e.value.code == "unknown_verb" and e.value.hint
        assert e.value.result.status == "error"
        r = ctl.cache_control("pin_everything", block_hashes=[1], check=False)
        assert not r.ok and r.error is not None and r.to_dict()["code"] == "unknown_verb"


def test_apply_refused_turn(kvpilot_host) -> None:
    with ControlClient(kvpilot_host.control_socket) as ctl:
        turn = [d.pause([0xDEAD], lease_id="idle"), {"type": "RevokeLease", "lease_id": "nope"}]
        with pytest.raises(NotFoundError) as e:
            ctl.apply(turn, turn_id="t-1")
        err = e.value
        assert isinstance(err, UnknownBlock) and err.index == 0 and err.hint
        res = err.result
        assert not res.ok and res.turn_id == "t-1"
        assert [r.verb for r in res.results] == ["Pause", "RevokeLease"]
        assert isinstance(res.results[1].error, UnknownLease)

        res = ctl.apply(turn, check=False)
        assert not res.ok and isinstance(res.error, UnknownBlock)


def test_apply_directives_and_dicts(kvpilot_host) -> None:
    tokens = list(range(40, 40 + 2 * PAGE))
    with (
        EngineClient(kvpilot_host.engine_socket, LAYOUT) as c,
        ControlClient(kvpilot_host.control_socket) as ctl,
    ):
        hashes = commit_prefix(c, tokens, "sess")
        res = ctl.apply(
            [
                {"type": "Cache", "block_hashes": [hex(h) for h in hashes], "pin": True},
                d.cache(hashes, pin=False),
                d.pin("sess", end=2 * PAGE, ttl="1h"),
            ],
            tenant="",
        )
        assert res.ok and [r.verb for r in res.results] == ["Cache", "Cache", "Pin"]
        assert res.results[0].effect.blocks == 2
        assert res.results[2].effect.ttl_seconds == 3600
        assert ctl.stats().tiers["device"].pinned_pages == 2


def test_watch_events_sees_commits(kvpilot_host) -> None:
    tokens = list(range(900, 900 + 2 * PAGE))
    events = []
    ready = threading.Event()
    with (
        EngineClient(kvpilot_host.engine_socket, LAYOUT) as c,
        ControlClient(kvpilot_host.control_socket) as ctl,
    ):
        stream = ctl.watch_events(["device"], ready=ready)

        def watch() -> None:
            for ev in stream:
                events.append(ev)
                if ev.kind == "stored":
                    return

        th = threading.Thread(target=watch, daemon=True)
        th.start()
        assert ready.wait(5)
        hashes = commit_prefix(c, tokens, "events")
        th.join(5)
        assert not th.is_alive()
        stored = [e for e in events if e.kind == "stored"]
        assert stored and stored[0].storage_tier == "device"
        assert [b for b, _ in stored[0].blocks] == hashes[: len(stored[0].blocks)]
        stream.close()


def test_watch_ends_when_client_closes(kvpilot_host) -> None:
    ctl = ControlClient(kvpilot_host.control_socket)
    done = threading.Event()

    def watch() -> None:
        for _ in ctl.watch_events():
            pass
        done.set()

    threading.Thread(target=watch, daemon=True).start()
    time.sleep(0.2)
    ctl.close()
    assert done.wait(5)


def test_missing_control_socket(tmp_path) -> None:
    path = str(tmp_path / "control.sock")
    with pytest.raises(Unavailable) as e:
        ControlClient(path)
    assert path in str(e.value) and "kvpilot serve" in str(e.value)


def test_host_down_is_unavailable(kvpilot_host) -> None:
    with ControlClient(kvpilot_host.control_socket, timeout=1) as ctl:
        ctl.stats()
        kvpilot_host.kill()
        with pytest.raises(Unavailable):
            ctl.stats()
