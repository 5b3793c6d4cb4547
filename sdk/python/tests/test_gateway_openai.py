"""The front door driven by the official ``openai`` SDK, through to the
reference engine: chat completions streaming and not, tools and tool
results, cached tokens in the usage, context_management edits (kvpilot's
extension field in the request and the response) and OpenAI-shaped errors.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from gateway_support import MODEL, FrontDoor, tool_output

from kvpilot import ControlClient

SESSION = {"x-kvpilot-session": "oa-1", "x-kvpilot-tenant": "acme"}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
]


def client(fd: FrontDoor) -> openai.OpenAI:
    return openai.OpenAI(base_url=fd.openai_base, api_key="unused", max_retries=0, timeout=30)


def test_models_pass_through(front_door: FrontDoor) -> None:
    models = client(front_door).models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_second_turn_hits_the_cache(front_door: FrontDoor) -> None:
    c = client(front_door)
    msgs: list[Any] = [
        {"role": "system", "content": "You are terse. " * 20},
        {"role": "user", "content": "Say something about caches."},
    ]
    first = c.chat.completions.create(model=MODEL, messages=msgs, extra_headers=SESSION)
    assert first.choices[0].message.content
    assert first.usage is not None and first.usage.prompt_tokens > 0
    msgs += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "More."},
    ]
    second = c.chat.completions.create(model=MODEL, messages=msgs, extra_headers=SESSION)
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    # Everything before the new user message, to the last full page.
    assert cached >= first.usage.prompt_tokens - 16, (cached, first.usage.prompt_tokens)
    assert (second.model_extra or {}).get("context_management") == {"applied_edits": []}


def test_stream_with_usage(front_door: FrontDoor) -> None:
    c = client(front_door)
    msgs: list[Any] = [{"role": "user", "content": "Stream a short answer please."}]
    text, usage = "", None
    for chunk in c.chat.completions.create(
        model=MODEL,
        messages=msgs,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=SESSION,
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage is not None:
            usage = chunk.usage
    assert text.startswith("Reference answer")
    assert usage is not None and usage.prompt_tokens > 0


def test_tool_calls_edits_and_stickiness(front_door: FrontDoor) -> None:
    """clear_tool_uses in kvpilot's context_management extension: once the
    context passes the trigger, every tool result but the newest (keep 1)
    is cleared on every turn, by the documented rule on the whole history,
    and reported in the response (an empty applied_edits before); the turn
    after an edit still hits the cache past it."""
    c = client(front_door)
    edits = {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 900},
                "keep": {"type": "tool_uses", "value": 1},
            }
        ]
    }
    msgs: list[Any] = [
        {"role": "system", "content": "You are a coding agent with a bash tool."},
        {"role": "user", "content": "Look around, one command at a time."},
    ]
    cleared_before = 0
    saw_edit = False
    for turn in range(7):
        r = c.chat.completions.create(
            model=MODEL,
            messages=msgs,
            tools=TOOLS,
            tool_choice="required",
            extra_headers=SESSION,
            extra_body={"context_management": edits},
        )
        applied = (r.model_extra or {})["context_management"]["applied_edits"]
        cleared = sum(a.get("cleared_tool_uses", 0) for a in applied)
        # turn tool results went out; once triggered, all but keep are cleared.
        assert cleared in (0, turn - 1), f"turn {turn}: {cleared} of {turn} results cleared"
        assert (cleared == 0) == (applied == []), applied
        assert cleared >= cleared_before, "a cleared tool result came back"
        if cleared > cleared_before:
            saw_edit = True
            assert applied[0]["cleared_input_tokens"] > 0
        if turn > 0:
            assert r.usage is not None and r.usage.prompt_tokens_details is not None
            new = r.usage.prompt_tokens - (r.usage.prompt_tokens_details.cached_tokens or 0)
            assert new < 300, (
                f"turn {turn}: {new} tokens prefilled; the cache should hold all but the new turn"
            )
        cleared_before = cleared
        call = r.choices[0].message.tool_calls
        assert call, "tool_choice=required gets a tool call"
        msgs.append(r.choices[0].message.model_dump(exclude_none=True))
        msgs.append({"role": "tool", "tool_call_id": call[0].id, "content": tool_output(turn)})
    assert saw_edit


def test_unknown_model_is_404(front_door: FrontDoor) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client(front_door).chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "hi"}]
        )
    assert e.value.code == "model_not_found"


def test_malformed_json_is_400(front_door: FrontDoor) -> None:
    r = httpx.post(
        front_door.openai_base + "/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "bad_request" and err["hint"]


def test_upstream_down_is_502_and_keeps_the_session(front_door_factory: Any) -> None:
    fd: FrontDoor = front_door_factory()
    c = client(fd)
    msgs: list[Any] = [{"role": "user", "content": "Hello there, engine."}]
    c.chat.completions.create(model=MODEL, messages=msgs, extra_headers=SESSION)
    fd.engine.stop()
    with pytest.raises(openai.InternalServerError) as e:
        c.chat.completions.create(model=MODEL, messages=msgs, extra_headers=SESSION)
    assert e.value.status_code == 502
    body: Any = e.value.body
    assert body["code"] == "unavailable"


def test_unpaired_tool_messages_are_400(front_door: FrontDoor) -> None:
    """A tool message that answers no preceding tool_calls, and tool_calls no
    tool message answers, are refused as OpenAI's API refuses them."""
    c = client(front_door)
    call: Any = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        ],
    }
    answer: Any = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    go: Any = {"role": "user", "content": "Go."}
    for msgs, want in [
        ([go, answer], "a tool message must answer the tool_calls"),
        ([go, call, {"role": "user", "content": "And?"}], 'the call "call_1" has no tool message'),
        ([go, call, {**answer, "tool_call_id": "call_9"}], 'tool_call_id "call_9"'),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS)
        assert e.value.status_code == 400 and want in e.value.message
        assert e.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    ok = c.chat.completions.create(model=MODEL, messages=[go, call, answer], tools=TOOLS)
    assert ok.choices


def test_prompt_too_long_is_400(front_door: FrontDoor) -> None:
    """A prompt the engine cannot hold (a 5 MB message): 400 with OpenAI's
    context_length_exceeded, which the SDK does not retry."""
    c = openai.OpenAI(base_url=front_door.openai_base, api_key="unused", max_retries=2)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x" * (5 << 20)}]
        )
    assert e.value.status_code == 400 and e.value.code == "context_length_exceeded"


def test_prompt_cache_fields_pin(front_door: FrontDoor) -> None:
    """OpenAI's prompt caching fields, as the SDK's own types write them:
    an explicit breakpoint on a content part pins the prefix through its
    message; the fields never reach the engine.
    """
    c = client(front_door)
    system: Any = [
        {
            "type": "text",
            "text": "A long shared system prompt. " * 40,
            "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"},
        }
    ]
    session = {"x-kvpilot-session": "oa-pin", "x-kvpilot-tenant": "pins"}
    reply = c.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi."}],
        prompt_cache_options={"mode": "explicit", "ttl": "30m"},
        prompt_cache_retention="in_memory",
        extra_headers=session,
    )
    assert reply.choices[0].message.content
    with ControlClient(front_door.host.control_socket) as ctl:
        st = ctl.stats("pins")
    assert st.tiers["device"].pinned_pages > 0


def test_prompt_cache_fields_refused(front_door: FrontDoor) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client(front_door).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hi."}],
            extra_body={"prompt_cache_retention": "7d"},
            extra_headers=SESSION,
        )
    assert "prompt_cache_retention" in str(e.value)
