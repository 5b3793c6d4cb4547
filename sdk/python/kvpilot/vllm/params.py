"""What one request tells kvpilot: its ``kv_transfer_params``.

A request reaches the connector with vLLM's per-request
``kv_transfer_params`` (the OpenAI server's ``kv_transfer_params`` body
field, or ``SamplingParams(extra_args={"kv_transfer_params": ...})``
offline). kvpilot reads its own object under the ``"kvpilot"`` key and
leaves every other key to other connectors::

    {"kvpilot": {"session": "chat-42", "tenant": "acme",
                 "cache_control": {"type": "ephemeral", "ttl": "5m"}}}

- ``session``: the conversation the request belongs to (the host keeps each
  session's cached sequence, for session-level directives);
- ``tenant``: whose namespace the pages are cached in;
- ``cache_control``: Anthropic's ``{"type": "ephemeral", "ttl": ...}``; an
  ephemeral one pins the request's cached prefix for the TTL when it
  finishes;
- ``thinking``: ``[[start, end], ...]``, the prompt's token spans that
  hold reasoning (the host's think-evict policy splices older turns'
  reasoning out and keeps new reasoning transient).

All fields are optional. A malformed object is refused for that request
only, with a message naming the field (see ``KvpilotConnector``). The same
fields may come as vLLM KV hints instead (kvpilot.vllm.hints).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvpilot.errors import InvalidTTL
from kvpilot.ttl import parse_seconds

#: The key of kvpilot's object in a request's kv_transfer_params.
PARAMS_KEY = "kvpilot"

_FIELDS = ("session", "tenant", "cache_control", "thinking")
# Sessions and tenants are names, as the host takes them: printable ASCII.
_MAX_NAME = 256
_CACHE_CONTROL_TYPES = ("ephemeral",)
_MAX_SPANS = 1024


class RequestParamsError(ValueError):
    """A request's ``kv_transfer_params["kvpilot"]`` is malformed."""


@dataclass(frozen=True)
class RequestParams:
    """The kvpilot fields of one request (empty strings when absent)."""

    session: str = ""
    tenant: str = ""
    #: ``{"type": "ephemeral", "ttl": ...}`` exactly as the request gave it,
    #: or None.
    cache_control: dict[str, Any] | None = None
    #: Prompt token spans ``(start, end)`` holding reasoning, ascending.
    thinking: tuple[tuple[int, int], ...] = ()

    @classmethod
    def parse(cls, kv_transfer_params: Any) -> RequestParams:
        """Reads a request's ``kv_transfer_params``; raises RequestParamsError."""
        if kv_transfer_params is None:
            return cls()
        if not isinstance(kv_transfer_params, Mapping):
            raise RequestParamsError(
                f"kv_transfer_params is a {type(kv_transfer_params).__name__}: want an object"
            )
        ours = kv_transfer_params.get(PARAMS_KEY)
        if ours is None:
            return cls()
        where = f"kv_transfer_params.{PARAMS_KEY}"
        if not isinstance(ours, Mapping):
            raise RequestParamsError(
                f"{where} is a {type(ours).__name__}: want an object with session, tenant, "
                "cache_control and thinking"
            )
        unknown = sorted(str(k) for k in ours if k not in _FIELDS)
        if unknown:
            raise RequestParamsError(
                f"{where}.{unknown[0]} is not a kvpilot field (known: {', '.join(_FIELDS)})"
            )
        return cls(
            session=_name(ours, "session", where),
            tenant=_name(ours, "tenant", where),
            cache_control=parse_cache_control(ours.get("cache_control"), f"{where}.cache_control"),
            thinking=parse_spans(ours.get("thinking"), f"{where}.thinking"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as kv_transfer_params would carry them (set ones only)."""
        out: dict[str, Any] = {}
        if self.session:
            out["session"] = self.session
        if self.tenant:
            out["tenant"] = self.tenant
        if self.cache_control is not None:
            out["cache_control"] = dict(self.cache_control)
        if self.thinking:
            out["thinking"] = [list(s) for s in self.thinking]
        return out

    def check_prompt(self, prompt_tokens: int) -> None:
        """Raises RequestParamsError when a thinking span passes the prompt."""
        for start, end in self.thinking:
            if end > prompt_tokens:
                raise RequestParamsError(
                    f"thinking span [{start}, {end}) passes the prompt's {prompt_tokens} tokens"
                )


def parse_spans(v: Any, where: str) -> tuple[tuple[int, int], ...]:
    """Token spans ``[[start, end], ...]``: ascending, not overlapping."""
    if v is None:
        return ()
    if not isinstance(v, (list, tuple)) or len(v) > _MAX_SPANS:
        raise RequestParamsError(
            f"{where}: want a list of at most {_MAX_SPANS} [start, end] token spans"
        )
    out: list[tuple[int, int]] = []
    for i, sp in enumerate(v):
        if (
            not isinstance(sp, (list, tuple))
            or len(sp) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in sp)
            or not 0 <= sp[0] < sp[1]
        ):
            raise RequestParamsError(
                f"{where}[{i}] = {sp!r}: want [start, end] with 0 <= start < end"
            )
        if out and sp[0] < out[-1][1]:
            raise RequestParamsError(
                f"{where}[{i}] = {list(sp)!r} starts before the span ahead of it ends"
            )
        out.append((int(sp[0]), int(sp[1])))
    return tuple(out)


def parse_name(v: Any, where: str) -> str:
    """A session or tenant name: printable ASCII, at most 256 characters."""
    if v is None:
        return ""
    if not isinstance(v, str):
        raise RequestParamsError(f"{where} is a {type(v).__name__}: want a string")
    if len(v) > _MAX_NAME or not all(" " <= c <= "~" for c in v):
        raise RequestParamsError(f"{where}: want at most {_MAX_NAME} printable ASCII characters")
    return v


def _name(ours: Mapping[str, Any], key: str, where: str) -> str:
    return parse_name(ours.get(key, ""), f"{where}.{key}")


def parse_cache_control(v: Any, where: str) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise RequestParamsError(
            f'{where} is a {type(v).__name__}: want {{"type": "ephemeral", "ttl": "5m"}}'
        )
    unknown = sorted(str(k) for k in v if k not in ("type", "ttl"))
    if unknown:
        raise RequestParamsError(f"{where}.{unknown[0]} is not a field (known: type, ttl)")
    kind = v.get("type", "ephemeral")
    if kind not in _CACHE_CONTROL_TYPES:
        raise RequestParamsError(f"{where}.type = {kind!r}: want 'ephemeral'")
    out: dict[str, Any] = {"type": kind}
    ttl = v.get("ttl")
    if ttl is not None:
        if not isinstance(ttl, (str, int, float)) or isinstance(ttl, bool):
            raise RequestParamsError(
                f'{where}.ttl = {ttl!r}: want seconds or a duration ("30s", "5m", "1h")'
            )
        try:
            parse_seconds(ttl)
        except InvalidTTL as e:
            raise RequestParamsError(f"{where}.ttl: {e.detail}") from None
        out["ttl"] = ttl if isinstance(ttl, str) else f"{ttl:g}"
    return out
