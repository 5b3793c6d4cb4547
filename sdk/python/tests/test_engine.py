"""EngineClient against a real `kvpilot serve`: registration, zero-copy arenas,
requests, a second process, host restarts, errors, fill orders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from kvpilot import ControlClient, EngineClient, Layout, Usage
from kvpilot import directives as d
from kvpilot.engine_types import CacheControl
from kvpilot.errors import (
    HostRestarted,
    InvalidError,
    InvalidLayout,
    KvpilotError,
    LayoutConflict,
    NotFoundError,
    Unavailable,
    UnavailableError,
    UnknownRequest,
)

SDK_ROOT = Path(__file__).resolve().parents[1]
PAGE = 16
LAYOUT = Layout.mha("py-test", page_size=PAGE, dtype="bf16", layers=2, kv_heads=2, head_dim=8)


def fill_pattern(client: EngineClient, slots: list[int], seed: int) -> None:
    """Writes distinct rows into every (layer, buffer) of slots through the
    typed numpy views: K via rows(), V via the raw segment."""
    for i, slot in enumerate(slots):
        for layer in range(LAYOUT.layers):
            rows = client.device.rows(slot, layer, 0)  # [page, heads, head_dim] uint16
            rows[:] = (
                np.arange(rows.size, dtype=np.uint16).reshape(rows.shape) + seed + 1000 * i + layer
            )
            seg = client.device.segment(slot, layer, 1)
            seg[:] = (np.arange(seg.size) * 7 + seed + i + layer) % 251


def run_prefill(client: EngineClient, tokens: list[int], session: str, seed: int) -> list[int]:
    """One whole request: match, allocate the uncached full pages, write
    them, commit, finish. Returns the slots of every full page."""
    m = client.match(tokens, session=session)
    full = len(tokens) // PAGE
    a = client.allocate(m.request_id, full - len(m.page_slots))
    fill_pattern(client, a.page_slots, seed)
    slots = m.page_slots + a.page_slots
    client.commit(m.request_id, tokens, slots)
    client.finish(m.request_id, usage=Usage(input_tokens=len(tokens)))
    return slots


READER = """
import json, sys
from kvpilot import EngineClient, Layout
lay = Layout.mha("py-test", page_size=16, dtype="bf16", layers=2, kv_heads=2, head_dim=8)
tokens = json.loads(sys.argv[2])
with EngineClient(sys.argv[1], lay, engine_id="reader") as c:
    m = c.match(tokens, session="reader")
    pages = [c.device.read_page(s).hex() for s in m.page_slots]
    c.release(m.request_id)
    print(json.dumps({"cached_tokens": m.cached_tokens, "pages": pages,
                      "boot_id": c.registration.boot_id}))
"""


def read_from_other_process(socket: str, tokens: list[int]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(SDK_ROOT))
    out = subprocess.run(
        [sys.executable, "-c", READER, socket, json.dumps(tokens)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_pages_shared_with_another_process_and_host_restart(kvpilot_host) -> None:
    tokens = list(range(1000, 1000 + 3 * PAGE + 5))
    regs = []
    with EngineClient(kvpilot_host.engine_socket, LAYOUT, on_reregister=regs.append) as c:
        reg = c.registration
        assert reg.generation == 1 and reg.mode == "arena" and not reg.joined
        assert reg.page_bytes == LAYOUT.page_bytes() == 2048
        assert c.device.tier == "device" and c.device.mapped and not c.device.staging
        assert c.host is not None and c.host.arrangement == "page_major"

        slots = run_prefill(c, tokens, "writer", seed=11)
        want = [c.device.read_page(s).hex() for s in slots]

        # A second process maps the same pools and matches the prefix: the
        # bytes it reads are the ones written here, byte for byte.
        got = read_from_other_process(kvpilot_host.engine_socket, tokens)
        assert got["cached_tokens"] == 3 * PAGE
        assert got["pages"] == want
        assert got["boot_id"] == reg.boot_id

        # In arena mode the reader's registration retired this one (same
        # layout: an engine restart, re-attached to the same pools). The
        # next match registers again and is retried transparently.
        inflight = c.match(tokens + [7] * PAGE, session="writer")
        assert inflight.cached_tokens == 3 * PAGE and inflight.generation == 2
        assert c.registration.reattached and c.registration.boot_id == reg.boot_id

        # That request is in flight when the host dies (SIGKILL).
        kvpilot_host.kill()
        kvpilot_host.start()
        with pytest.raises(HostRestarted) as e:
            c.allocate(inflight.request_id, 1)
        assert e.value.code == "unknown_registration" and "match" in e.value.hint
        assert c.registration.boot_id != reg.boot_id
        assert c.registration.generation == 3
        assert [r.generation for r in regs] == [2, 3]

        # The engine's next request runs on the new registration.
        def request(client: EngineClient) -> int:
            run_prefill(client, tokens, "after-restart", seed=23)
            return client.registration.generation

        assert c.run_request(request) == 3
        # The old device arena is retired, still mapped, not the live one.
        assert c.device.mapped


def test_run_request_reruns_a_request_the_restart_killed(kvpilot_host) -> None:
    tokens = list(range(50, 50 + 2 * PAGE))
    attempts = []
    with EngineClient(kvpilot_host.engine_socket, LAYOUT, timeout=15) as c:
        boot = c.registration.boot_id

        def request(client: EngineClient) -> int:
            attempts.append(client.registration.generation)
            m = client.match(tokens, session="rr")
            if len(attempts) == 1:
                kvpilot_host.restart()  # SIGTERM, then the same data dir
            a = client.allocate(m.request_id, 2 - len(m.page_slots))
            client.commit(m.request_id, tokens, m.page_slots + a.page_slots)
            return client.release(m.request_id)

        c.run_request(request, backoff=0.01)
        assert attempts == [1, 2]
        assert c.registration.boot_id != boot


def test_host_down_is_unavailable_then_registers_again(kvpilot_host) -> None:
    with EngineClient(kvpilot_host.engine_socket, LAYOUT, timeout=1.0) as c:
        boot = c.registration.boot_id
        kvpilot_host.kill()
        with pytest.raises(UnavailableError) as e:
            c.match([1, 2, 3])
        assert isinstance(e.value, Unavailable)
        assert e.value.hint and e.value.code == "unavailable"
        kvpilot_host.start()
        m = c.match(list(range(PAGE)), session="back")
        assert m.generation == 2 and c.registration.boot_id != boot
        c.release(m.request_id)


def test_missing_socket_names_the_path(tmp_path) -> None:
    path = str(tmp_path / "no-host" / "engine.sock")
    t0 = time.monotonic()
    with pytest.raises(Unavailable) as e:
        EngineClient(path, LAYOUT, timeout=0.5)
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert path in msg and "no such socket" in msg and "kvpilot serve" in msg
    assert e.value.hint


def test_layout_errors_carry_code_and_hint(kvpilot_host) -> None:
    # Refused before connecting.
    with pytest.raises(InvalidLayout) as e:
        EngineClient(kvpilot_host.engine_socket, Layout("m", 0, "bf16", 1, ()))
    assert e.value.number == 2010 and "page_size" in e.value.detail and e.value.hint
    # Refused by the host: its page size is the index's.
    bad = Layout.mha("py-test", page_size=8, dtype="bf16", layers=2, kv_heads=2, head_dim=8)
    with pytest.raises(InvalidError) as e:
        EngineClient(kvpilot_host.engine_socket, bad)
    assert isinstance(e.value, InvalidLayout)
    assert "index.page_size" in e.value.detail and "page size" in e.value.hint
    # Another layout while pages are cached: layout_conflict, unless reset.
    with EngineClient(kvpilot_host.engine_socket, LAYOUT) as c:
        run_prefill(c, list(range(PAGE)), "lc", seed=1)
    other = Layout.mha("py-test", page_size=PAGE, dtype="fp16", layers=2, kv_heads=2, head_dim=8)
    with pytest.raises(LayoutConflict) as e:
        EngineClient(kvpilot_host.engine_socket, other)
    assert "reset" in e.value.hint
    with EngineClient(kvpilot_host.engine_socket, other, reset_cache=True) as c:
        assert c.registration.cached_pages == 0


def test_calls_about_unknown_requests(kvpilot_host) -> None:
    with EngineClient(kvpilot_host.engine_socket, LAYOUT) as c:
        with pytest.raises(NotFoundError) as e:
            c.allocate("no-such-request", 1)
        assert isinstance(e.value, UnknownRequest) and e.value.number == 3006
        assert "Match" in e.value.hint
        with pytest.raises(KvpilotError) as e:
            c.finish("no-such-request", cache_control="{not json")
        assert e.value.code in ("bad_request", "unknown_request")


@pytest.mark.parametrize(
    "cc",
    [
        {"cache_control": {"type": "ephemeral", "ttl": "5m"}},
        '{"nvext": {"cache_control": {"type": "ephemeral", "ttl": 300}}}',
        {"type": "ephemeral", "ttl": "5m"},
        CacheControl(ttl=300),
    ],
    ids=["anthropic", "nvext", "bare", "object"],
)
def test_finish_pins_with_cache_control(kvpilot_host, cc) -> None:
    tokens = list(range(7, 7 + 2 * PAGE))
    with EngineClient(kvpilot_host.engine_socket, LAYOUT) as c:
        run_prefill(c, tokens, "cc", seed=3)
        m = c.match(tokens, session="cc")
        r = c.finish(m.request_id, cache_control=cc)
        assert r.pinned and r.pinned_blocks == r.total_blocks == 2
        assert r.ttl_ms == 300_000 and r.pin_error is None


def test_arena_geometry_matches_the_host(kvpilot_host) -> None:
    """The host copies committed device pages (layer_major) into its host
    tier (page_major) with its own geometry; reading both in canonical
    order must agree."""
    tokens = list(range(300, 300 + 2 * PAGE))
    with (
        EngineClient(kvpilot_host.engine_socket, LAYOUT) as c,
        ControlClient(kvpilot_host.control_socket) as ctl,
    ):
        slots = run_prefill(c, tokens, "geo", seed=41)
        want = {c.device.read_page(s) for s in slots}
        deadline = time.monotonic() + 10
        while ctl.stats().tiers["host"].pages < len(slots):
            assert time.monotonic() < deadline, "pages never written through to the host tier"
            time.sleep(0.02)
        host = c.host
        assert host is not None
        found = {host.read_page(s) for s in range(host.slots)} & want
        assert found == want


def test_torch_views_alias_the_arena(kvpilot_host) -> None:
    torch = pytest.importorskip(
        "torch", reason="torch is not installed here: pip install 'kvpilot[torch]', or make py-env"
    )
    with EngineClient(kvpilot_host.engine_socket, LAYOUT) as c:
        for arena in (c.device, c.host):
            assert arena is not None
            for layer in range(LAYOUT.layers):
                for buf in range(2):
                    t = arena.tensor(layer, buf)
                    assert t.shape == (arena.slots, PAGE, 2, 8) and t.dtype == torch.bfloat16
                    t[3] = float(layer * 2 + buf + 1)
                    rows = arena.rows(3, layer, buf)  # raw bf16 bits
                    assert (rows == np.uint16(t[3, 0, 0, 0].view(torch.int16).item())).all()
            assert arena.tensor(0, 0).is_contiguous() == (arena.arrangement == "layer_major")


def test_fill_orders_from_a_splice(kvpilot_host) -> None:
    tokens = list(range(500, 500 + 3 * PAGE))
    orders = []
    with (
        EngineClient(kvpilot_host.engine_socket, LAYOUT) as c,
        ControlClient(kvpilot_host.control_socket) as ctl,
    ):
        run_prefill(c, tokens, "splice-me", seed=5)

        def serve() -> None:
            for o in c.fill_orders():
                orders.append(o)
                try:
                    c.complete_fill(o.order_id)
                except Unavailable:
                    assert c.closed  # close() raced the answer

        th = threading.Thread(target=serve, daemon=True)
        th.start()
        res = ctl.apply([d.splice("splice-me", 20, 24, tokens=[1, 2, 3, 4, 5])])
        assert res.ok and res.results[0].verb == "Splice"
        deadline = time.monotonic() + 10
        while not orders:
            assert time.monotonic() < deadline, "no fill order arrived"
            time.sleep(0.02)
        o = orders[0]
        assert o.session == "splice-me" and o.position == 20 and o.tokens == [1, 2, 3, 4, 5]
        assert o.page_slots and o.first_offset == 20 % PAGE
        c.close()  # ends the stream
        th.join(5)
        assert not th.is_alive()


def test_fill_orders_stream_opens_and_closes(kvpilot_host) -> None:
    c = EngineClient(kvpilot_host.engine_socket, LAYOUT)
    done = threading.Event()

    def serve() -> None:
        for _ in c.fill_orders():
            pass
        done.set()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    time.sleep(0.2)
    assert th.is_alive()
    c.close()
    assert done.wait(5)
    assert list(c.fill_orders()) == []


def test_connector_mode_processes_join(kvpilot_host) -> None:
    kw = {"engine_id": "vllm-0", "mode": "connector"}
    with EngineClient(kvpilot_host.engine_socket, LAYOUT, **kw) as a:
        ra = a.registration
        assert ra.mode == "connector" and not ra.joined
        assert a.device.staging and a.device.kind == "memfd"
        with EngineClient(kvpilot_host.engine_socket, LAYOUT, **kw) as b:
            assert b.registration.joined and b.registration.id == ra.id
            # Both map the same staging memory.
            a.device.segment(0, 0, 0)[:] = 0x5A
            assert (b.device.segment(0, 0, 0) == 0x5A).all()


def test_ensure_registered_follows_a_restart(kvpilot_host) -> None:
    # After a restart one process of a connector engine registers first;
    # the other catches up with ensure_registered, onto the same registration.
    kw = {"engine_id": "vllm-0", "mode": "connector"}
    sock = kvpilot_host.engine_socket
    with EngineClient(sock, LAYOUT, **kw) as a, EngineClient(sock, LAYOUT, **kw) as b:
        old = a.registration
        assert a.ensure_registered() == old  # live: nothing changes
        kvpilot_host.restart()
        a.match(list(range(2 * PAGE)))  # registers with the new host
        assert a.registration.boot_id != old.boot_id
        assert b.registration.id == old.id
        rb = b.ensure_registered()
        assert rb.id == a.registration.id and rb.joined


def test_commit_from_a_page_and_never_into_a_new_registration(kvpilot_host) -> None:
    # A connector saves a chunked prompt in several commits: each sends its
    # new pages' slots only (first_page), and none is sent once the host
    # restarted, where the same slot numbers name other pages.
    kw = {"engine_id": "vllm-0", "mode": "connector"}
    sock = kvpilot_host.engine_socket
    tokens = list(range(1000, 1000 + 4 * PAGE + 3))
    with EngineClient(sock, LAYOUT, **kw) as c:
        assert "commit_first_page" in c.registration.features
        m = c.match(tokens)
        first = c.allocate(m.request_id, 2).page_slots
        assert c.commit(m.request_id, tokens, first).stored == 2
        rest = c.allocate(m.request_id, 2).page_slots
        r = c.commit(m.request_id, tokens, rest, first_page=2)
        assert (r.stored, len(r.block_hashes)) == (2, 4)
        c.release(m.request_id)
        assert c.match(tokens).cached_tokens == 4 * PAGE

        m = c.match(list(range(5000, 5000 + 3 * PAGE)))
        slots = c.allocate(m.request_id, 3).page_slots
        old = c.registration.id
        kvpilot_host.restart()
        c.ensure_registered()
        assert c.registration.id != old
        with pytest.raises(HostRestarted, match=r"registration \w+ ended"):
            c.commit(m.request_id, tokens, slots, registration_id=old)
        with pytest.raises(HostRestarted):
            c.allocate(m.request_id, 1, registration_id=old)


def test_concurrent_callers_register_once(kvpilot_host) -> None:
    regs = []
    with EngineClient(kvpilot_host.engine_socket, LAYOUT, on_reregister=regs.append) as c:
        kvpilot_host.restart()
        results, errors = [], []

        def call(i: int) -> None:
            try:
                results.append(c.match(list(range(i, i + PAGE)), session=f"t{i}"))
            except KvpilotError as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(20)
        assert not errors and len(results) == 6
        assert c.registration.generation == 2 and [r.generation for r in regs] == [2]
        assert {m.generation for m in results} == {2}


def test_match_with_chat_messages(kvpilot_host) -> None:
    from kvpilot import ChatMessage

    tokens = list(range(200, 200 + 2 * PAGE))
    msgs = [
        ChatMessage("system", "be brief", span=(0, 8)),
        {
            "role": "assistant",
            "content": "<think>hm</think> ok",
            "span": (8, 32),
            "thinking": [(9, 12)],
        },
        ChatMessage("tool", "42", tool_name="calc", span=(32, 32)),
    ]
    with EngineClient(kvpilot_host.engine_socket, LAYOUT) as c:
        m = c.match(tokens, session="chat", tenant="", messages=msgs, load_back_deadline_ms=50)
        assert m.cached_tokens == 0 and len(m.block_hashes) == 2
        assert c.release(m.request_id) == 0


def test_fill_orders_resubscribe_across_a_host_restart(kvpilot_host) -> None:
    tokens = list(range(700, 700 + 3 * PAGE))
    orders, regs = [], []
    with EngineClient(kvpilot_host.engine_socket, LAYOUT, on_reregister=regs.append) as c:

        def serve() -> None:
            for o in c.fill_orders():
                orders.append(o)
                try:
                    c.complete_fill(o.order_id, ok=False, error="test engine declines")
                except Unavailable:
                    assert c.closed  # close() raced the answer

        th = threading.Thread(target=serve, daemon=True)
        th.start()
        time.sleep(0.1)
        kvpilot_host.kill()
        kvpilot_host.start()
        # The stream notices, registers again and resubscribes by itself.
        deadline = time.monotonic() + 10
        while c.registration.generation < 2:
            assert time.monotonic() < deadline, "fill_orders never registered again"
            time.sleep(0.02)
        assert [r.generation for r in regs] == [2]
        run_prefill(c, tokens, "resub", seed=9)
        with ControlClient(kvpilot_host.control_socket) as ctl:
            ctl.apply([d.splice("resub", 20, 22, tokens=[3, 4])])
        while not orders:
            assert time.monotonic() < deadline, "no fill order after the restart"
            time.sleep(0.02)
        assert orders[0].session == "resub"
    th.join(5)
    assert not th.is_alive()
