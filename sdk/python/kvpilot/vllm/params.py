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
  finishes.

All fields are optional. A malformed object is refused for that request
only, with a message naming the field (see ``KvpilotConnector``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvpilot.errors import InvalidTTL
from kvpilot.ttl import parse_seconds

#: The key of kvpilot's object in a request's kv_transfer_params.
PARAMS_KEY = "kvpilot"

_FIELDS = ("session", "tenant", "cache_control")
# Sessions and tenants are names, as the host takes them: printable ASCII.
_MAX_NAME = 256
_CACHE_CONTROL_TYPES = ("ephemeral",)


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
                f"{where} is a {type(ours).__name__}: want an object with session, tenant "
                "and cache_control"
            )
        unknown = sorted(str(k) for k in ours if k not in _FIELDS)
        if unknown:
            raise RequestParamsError(
                f"{where}.{unknown[0]} is not a kvpilot field (known: {', '.join(_FIELDS)})"
            )
        return cls(
            session=_name(ours, "session", where),
            tenant=_name(ours, "tenant", where),
            cache_control=_cache_control(ours.get("cache_control"), f"{where}.cache_control"),
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
        return out


def _name(ours: Mapping[str, Any], key: str, where: str) -> str:
    v = ours.get(key, "")
    if v is None:
        return ""
    if not isinstance(v, str):
        raise RequestParamsError(f"{where}.{key} is a {type(v).__name__}: want a string")
    if len(v) > _MAX_NAME or not all(" " <= c <= "~" for c in v):
        raise RequestParamsError(
            f"{where}.{key}: want at most {_MAX_NAME} printable ASCII characters"
        )
    return v


def _cache_control(v: Any, where: str) -> dict[str, Any] | None:
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
