"""kvpilot's directives as vLLM KV hints (``vllm.v1.kv_hints``).

vLLM 0.32 carries versioned orchestrator hints on a request: a
``KvHintsEnvelope(protocol_version, message_id, actions)`` whose actions
are ``KvHintAction(action_id, action_type, action_version, payload)``; the
component that implements an action type validates its payload. A request
gets them through ``LLMEngine.add_request(..., kv_hints=...)`` or
``AsyncLLM.generate(..., kv_hints=...)``; vLLM's OpenAI server and
``LLM.generate`` do not take them in 0.32. The scheduler-side connector
reads ``request.kv_hints``.

The action types kvpilot implements, each at ``action_version`` "1" (the
same fields as ``kv_transfer_params["kvpilot"]``, kvpilot.vllm.params, with
the same checks)::

    kvpilot.session  {"session": "chat-42"}       the conversation
    kvpilot.tenant   {"tenant": "acme"}           whose namespace
    kvpilot.pin      {"ttl": "5m"}                pin the cached prefix at finish
                                                  (cache_control ephemeral; ttl optional)
    kvpilot.think    {"spans": [[0, 120], ...]}   prompt token spans holding reasoning

Other components' action types are left alone. A kvpilot action with
another version, an unknown payload field, a bad value, or a field that
``kv_transfer_params`` sets differently refuses the request, as a
malformed ``kv_transfer_params`` does, with a message naming the action.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvpilot.vllm.params import (
    RequestParams,
    RequestParamsError,
    parse_cache_control,
    parse_name,
    parse_spans,
)

#: The action version kvpilot implements.
ACTION_VERSION = "1"

_PREFIX = "kvpilot."


def _required(p: Mapping[str, Any], key: str, where: str) -> Any:
    if p.get(key) is None:
        raise RequestParamsError(f"{where}.{key} is required")
    return p[key]


def _session(p: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {"session": parse_name(_required(p, "session", where), f"{where}.session")}


def _tenant(p: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {"tenant": parse_name(_required(p, "tenant", where), f"{where}.tenant")}


def _pin(p: Mapping[str, Any], where: str) -> dict[str, Any]:
    cc = {"type": "ephemeral"} | ({"ttl": p["ttl"]} if p.get("ttl") is not None else {})
    return {"cache_control": parse_cache_control(cc, where)}


def _think(p: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {"thinking": parse_spans(_required(p, "spans", where), f"{where}.spans")}


#: Per action type: its payload fields and what it sets.
ACTIONS: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, Any], str], dict[str, Any]]]] = {
    "kvpilot.session": (("session",), _session),
    "kvpilot.tenant": (("tenant",), _tenant),
    "kvpilot.pin": (("ttl",), _pin),
    "kvpilot.think": (("spans",), _think),
}


def apply_hints(params: RequestParams, kv_hints: Any) -> RequestParams:
    """The request's params with the kvpilot actions of kv_hints (a KvHintsEnvelope or
    its builtins) applied; raises RequestParamsError.
    """
    if kv_hints is None:
        return params
    env = _builtins(kv_hints)
    if not isinstance(env, Mapping) or not isinstance(env.get("actions"), list):
        raise RequestParamsError("kv_hints: want an envelope with a list of actions")
    fields = params.to_dict()
    given: dict[str, str] = {k: f"kv_transfer_params.kvpilot.{k}" for k in fields}
    for i, act in enumerate(env["actions"]):
        kind = act.get("action_type") if isinstance(act, Mapping) else None
        if not isinstance(kind, str) or not kind.startswith(_PREFIX):
            continue
        where = f"kv_hints.actions[{i}] ({kind})"
        spec = ACTIONS.get(kind)
        if spec is None:
            raise RequestParamsError(
                f"{where}: not a kvpilot action type (known: {', '.join(ACTIONS)})"
            )
        if act.get("action_version") != ACTION_VERSION:
            raise RequestParamsError(
                f"{where}.action_version = {act.get('action_version')!r}: kvpilot implements "
                f"version {ACTION_VERSION!r}"
            )
        payload = act.get("payload")
        if not isinstance(payload, Mapping):
            raise RequestParamsError(f"{where}.payload: want an object")
        known, read = spec
        unknown = sorted(str(k) for k in payload if k not in known)
        if unknown:
            raise RequestParamsError(
                f"{where}.payload.{unknown[0]} is not a field (known: {', '.join(known)})"
            )
        for key, value in read(payload, f"{where}.payload").items():
            value = [list(s) for s in value] if key == "thinking" else value
            if key in fields and fields[key] != value:
                raise RequestParamsError(f"{where} sets {key} unlike {given[key]}")
            fields[key], given[key] = value, where
    return RequestParams.parse({"kvpilot": fields})


def _builtins(kv_hints: Any) -> Any:
    if isinstance(kv_hints, Mapping):
        return kv_hints
    import msgspec

    return msgspec.to_builtins(kv_hints)
