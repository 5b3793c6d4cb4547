"""The front door driven by the official ``anthropic`` SDK, through to the
reference engine: Messages streaming and not, system, tool_use and
tool_result blocks, thinking, cache reads in the usage, the beta
context_management edits with applied_edits, cache_control breakpoints as
pins, and Anthropic-shaped errors.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest
from gateway_support import MODEL, FrontDoor, tool_output

from kvpilot import ControlClient

SESSION = {"x-kvpilot-session": "an-1", "x-kvpilot-tenant": "acme"}
TOOLS: list[Any] = [
    {"name": "bash", "description": "run a command", "input_schema": {"type": "object"}}
]
BETA = ["context-management-2025-06-27"]


def client(fd: FrontDoor) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=fd.anthropic_base, api_key="unused", max_retries=0, timeout=30
    )


def test_messages_and_cache_reads(front_door: FrontDoor) -> None:
    c = client(front_door)
    msgs: list[Any] = [{"role": "user", "content": "Tell me about caches."}]
    system = "You are terse. " * 20
    first = c.messages.create(
        model=MODEL, max_tokens=64, system=system, messages=msgs, extra_headers=SESSION
    )
    assert first.type == "message" and first.role == "assistant"
    assert first.content[0].type == "text" and first.content[0].text.startswith("Reference answer")
    assert first.stop_reason == "end_turn"
    assert first.usage.input_tokens > 0 and first.usage.cache_read_input_tokens == 0
    msgs += [
        {"role": "assistant", "content": first.content[0].text},
        {"role": "user", "content": "More."},
    ]
    second = c.messages.create(
        model=MODEL, max_tokens=64, system=system, messages=msgs, extra_headers=SESSION
    )
    assert (second.usage.cache_read_input_tokens or 0) >= first.usage.input_tokens - 16


def test_stream_events(front_door: FrontDoor) -> None:
    c = client(front_door)
    with c.messages.stream(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "Stream it."}],
        extra_headers=SESSION,
    ) as s:
        kinds = [ev.type for ev in s]
        final = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and "message_delta" in kinds
    assert final.content[0].type == "text" and final.content[0].text.startswith("Reference answer")
    assert final.usage.input_tokens > 0 and final.stop_reason == "end_turn"


def test_tool_use_thinking_and_cleared_tool_results(front_door: FrontDoor) -> None:
    """Beta clear_tool_uses and clear_thinking, streaming and not: once the
    context passes the trigger, every tool result but the newest (keep 1) is
    cleared on every turn, by the documented rule on the whole history, and
    reported in context_management.applied_edits, which lists only the
    edits that cleared something."""
    c = client(front_door)
    edits: Any = {
        "edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 900},
                "keep": {"type": "tool_uses", "value": 1},
                "clear_tool_inputs": True,
            },
        ]
    }
    msgs: list[Any] = [{"role": "user", "content": "Look around, one command at a time."}]
    cleared_before, saw_edit = 0, False
    for turn in range(7):
        kw: dict[str, Any] = dict(
            model=MODEL,
            max_tokens=64,
            system="You are a coding agent.",
            messages=msgs,
            tools=TOOLS,
            tool_choice={"type": "any"},
            betas=BETA,
            context_management=edits,
            extra_headers=SESSION,
        )
        if turn % 2:
            with c.beta.messages.stream(**kw) as s:
                r = s.get_final_message()
        else:
            r = c.beta.messages.create(**kw)
        assert r.context_management is not None
        by = {a.type: a for a in r.context_management.applied_edits}
        tool_edit = by.get("clear_tool_uses_20250919")
        cleared = tool_edit.cleared_tool_uses if tool_edit else 0
        # turn tool results went out; once triggered, all but keep are cleared.
        assert cleared in (0, turn - 1), f"turn {turn}: {cleared} of {turn} results cleared"
        assert cleared >= cleared_before
        if cleared > cleared_before:
            saw_edit = True
            assert tool_edit is not None and tool_edit.cleared_input_tokens > 0
        if turn > 1:
            # Thinking of all but the newest assistant turn is cleared.
            assert by["clear_thinking_20251015"].cleared_thinking_turns == turn - 1
        else:
            assert "clear_thinking_20251015" not in by, "nothing cleared, yet listed"
        cleared_before = cleared
        uses = [b for b in r.content if b.type == "tool_use"]
        assert uses and r.stop_reason == "tool_use"
        assistant: list[Any] = [
            {
                "type": "thinking",
                "thinking": f"I should look at part {turn}. " * 8,
                "signature": "x",
            }
        ]
        assistant += [
            {"type": "tool_use", "id": u.id, "name": u.name, "input": u.input} for u in uses
        ]
        msgs.append({"role": "assistant", "content": assistant})
        msgs.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": uses[0].id, "content": tool_output(turn)}
                ],
            }
        )
    assert saw_edit


def test_cache_control_breakpoint_pins(front_door: FrontDoor) -> None:
    c = client(front_door)
    system: Any = [
        {
            "type": "text",
            "text": "A long shared system prompt. " * 40,
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        }
    ]
    c.messages.create(
        model=MODEL,
        max_tokens=16,
        system=system,
        messages=[{"role": "user", "content": "Hi."}],
        extra_headers=SESSION,
    )
    with ControlClient(front_door.host.control_socket) as ctl:
        st = ctl.stats("acme")
    assert st.tiers["device"].pinned_pages > 0


def test_errors_in_anthropic_shape(front_door_factory: Any) -> None:
    fd: FrontDoor = front_door_factory()
    c = client(fd)
    with pytest.raises(anthropic.NotFoundError) as nf:
        c.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert nf.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    r = httpx.post(
        fd.anthropic_base + "/v1/messages",
        content=b"[1,",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(
        fd.anthropic_base + "/v1/messages",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
    )
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    fd.engine.stop()
    with pytest.raises(anthropic.InternalServerError) as down:
        c.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert down.value.status_code == 502
    assert down.value.body["error"]["type"] == "api_error"  # type: ignore[index]


def test_sub_page_breakpoint_pins_nothing_quietly(front_door_factory: Any) -> None:
    """A cache_control breakpoint whose prefix ends before the first page
    boundary pins nothing: the host says so once, at debug level, and
    neither warns nor audits an error on every request."""
    fd: FrontDoor = front_door_factory(log={"level": "debug"})
    c = client(fd)
    system: Any = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    for i in range(3):
        c.messages.create(
            model=MODEL,
            max_tokens=8,
            system=system,
            messages=[{"role": "user", "content": f"Question {i}?"}],
            extra_headers=SESSION,
        )
    log = fd.host.log_path.read_text(errors="replace")
    said = [line for line in log.splitlines() if "breakpoint" in line]
    assert len(said) == 1 and "DEBUG" in said[0] and "nothing pinned" in said[0], said
    audit = (fd.host.data_dir / "audit.log").read_text(errors="replace").splitlines()
    errors = [line for line in audit if '"status":"error"' in line]
    assert not errors, errors


def test_unpaired_tool_blocks_are_400(front_door: FrontDoor) -> None:
    """Tool blocks that do not pair up are refused as Anthropic's API refuses
    them: a tool_result of an unknown tool_use_id, a tool_use with no
    tool_result in the next message."""
    c = client(front_door)
    use: Any = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}],
    }

    def result(tool_use_id: str) -> Any:
        block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": "ok"}
        return {"role": "user", "content": [block]}

    go: Any = {"role": "user", "content": "Go."}
    for msgs, want in [
        ([go, use, result("toolu_9")], 'tool_result for tool_use_id "toolu_9"'),
        ([go, use, {"role": "user", "content": "And?"}], 'no tool_result for tool_use "toolu_1"'),
        ([go, result("toolu_1")], 'tool_result for tool_use_id "toolu_1"'),
    ]:
        with pytest.raises(anthropic.BadRequestError) as e:
            c.messages.create(model=MODEL, max_tokens=8, tools=TOOLS, messages=msgs)
        assert e.value.status_code == 400 and want in e.value.message
        assert e.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    ok = c.messages.create(
        model=MODEL, max_tokens=8, tools=TOOLS, messages=[go, use, result("toolu_1")]
    )
    assert ok.type == "message"


def test_prompt_too_long_is_400(front_door: FrontDoor) -> None:
    """A prompt the engine cannot hold (a 5 MB message) is the client's to
    fix: 400 invalid_request_error, which the SDK does not retry."""
    c = anthropic.Anthropic(base_url=front_door.anthropic_base, api_key="unused", max_retries=2)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "x" * (5 << 20)}]
        )
    assert e.value.status_code == 400 and "prompt too long" in e.value.message
    assert e.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
