"""Building kvpilot.v1 directives (Go: sdk/directive), for ControlClient.apply.

One constructor per verb returns a ``kvpilot.v1.Directive`` message::

    from kvpilot import directives as d

    client.apply([
        d.pin("chat-1", end=512, ttl="1h"),
        d.splice("chat-1", 40, 90, text="[tool output cleared]"),
        d.pause(hashes, ttl="10m", lease_id="chat-1-idle"),
    ])

``from_dict`` reads the JSON command form of the NATS plane and the docs
(``{"type": "Cache", "block_hashes": [...], "pin": true}``) as well as a
dict keyed by the proto's verb field (``{"pin": {"session": ..., "end": ...}}``).
TTLs are seconds, duration strings ("30s", "5m", "1h") or timedeltas; block
hashes are unsigned or signed 64-bit integers, or decimal / 0x-hex strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import json_format

from kvpilot.errors import BadRequest, InvalidHash, MissingField, UnknownVerb
from kvpilot.ttl import TTLValue, to_duration
from kvpilot.v1 import directive_pb2 as pb

__all__ = [
    "VERBS",
    "cache",
    "evict",
    "from_dict",
    "hash_value",
    "pause",
    "pin",
    "prune",
    "renew_lease",
    "resume",
    "retain",
    "revoke_lease",
    "share",
    "splice",
    "think",
    "to_directive",
    "verb_of",
    "warm",
]

#: Wire names of the verbs ("type" tags) and their proto oneof fields.
VERBS: dict[str, str] = {
    "Warm": "warm",
    "Prune": "prune",
    "Cache": "cache",
    "Think": "think",
    "Pause": "pause",
    "RenewLease": "renew_lease",
    "RevokeLease": "revoke_lease",
    "Splice": "splice",
    "Pin": "pin",
    "Retain": "retain",
    "Evict": "evict",
    "Resume": "resume",
    "Share": "share",
}
_FIELD_TO_VERB = {f: v for v, f in VERBS.items()}

_U64 = (1 << 64) - 1


def hash_value(h: int | str) -> int:
    """A block hash as an unsigned 64-bit integer.

    Accepts unsigned or signed 64-bit integers and decimal or 0x-hex strings.
    """
    if isinstance(h, bool):
        raise InvalidHash(repr(h))
    if isinstance(h, str):
        s = h.strip()
        try:
            v = int(s, 16) if s.lower().startswith(("0x", "-0x")) else int(s, 10)
        except ValueError:
            raise InvalidHash(repr(h)) from None
    elif isinstance(h, int):
        v = h
    else:
        try:
            v = int(h)
        except (TypeError, ValueError):
            raise InvalidHash(repr(h)) from None
    if not -(1 << 63) <= v <= _U64:
        raise InvalidHash(f"{h!r} does not fit in 64 bits")
    return v & _U64


def _hashes(hs: Iterable[int | str]) -> list[int]:
    return [hash_value(h) for h in hs]


def _set_ttl(msg: Any, field: str, ttl: TTLValue | None) -> None:
    d = to_duration(ttl)
    if d is not None:
        getattr(msg, field).CopyFrom(d)


def warm(block_keys: Sequence[str | int], target_tier: str = "device") -> pb.Directive:
    """Warm: bring blocks (hashes or keys) to ``target_tier``."""
    return pb.Directive(
        warm=pb.Warm(block_keys=[str(k) for k in block_keys], target_tier=target_tier)
    )


def prune(after_block_hash: int | str) -> pb.Directive:
    """Prune: drop every block after ``after_block_hash`` in its sequence."""
    return pb.Directive(prune=pb.Prune(after_block_hash=hash_value(after_block_hash)))


def cache(
    block_hashes: Iterable[int | str], pin: bool = True, ttl: TTLValue | None = None
) -> pb.Directive:
    """Cache: pin (or unpin, ``pin=False``) blocks, for ``ttl``."""
    m = pb.Cache(block_hashes=_hashes(block_hashes), pin=pin)
    _set_ttl(m, "ttl", ttl)
    return pb.Directive(cache=m)


def think(block_hashes: Iterable[int | str], transient: bool = True) -> pb.Directive:
    """Think: mark blocks as thinking, transient while in flight."""
    return pb.Directive(think=pb.Think(block_hashes=_hashes(block_hashes), transient=transient))


def pause(
    block_hashes: Iterable[int | str], ttl: TTLValue | None = None, lease_id: str = ""
) -> pb.Directive:
    """Pause: move blocks to the pause tier under a lease (indefinite when
    ``ttl`` is None).
    """
    m = pb.Pause(block_hashes=_hashes(block_hashes), lease_id=lease_id)
    _set_ttl(m, "ttl", ttl)
    return pb.Directive(pause=m)


def renew_lease(lease_id: str, ttl: TTLValue) -> pb.Directive:
    """RenewLease: extend a lease to ``ttl`` from now."""
    m = pb.RenewLease(lease_id=lease_id)
    _set_ttl(m, "new_ttl", ttl)
    return pb.Directive(renew_lease=m)


def revoke_lease(lease_id: str) -> pb.Directive:
    """RevokeLease: end a lease."""
    return pb.Directive(revoke_lease=pb.RevokeLease(lease_id=lease_id))


def splice(
    session: str,
    start: int,
    end: int,
    *,
    tokens: Sequence[int] | None = None,
    text: str = "",
    mode: str = "",
) -> pb.Directive:
    """Splice: replace token positions ``[start, end)`` of a session's cached
    sequence by ``tokens`` or ``text`` (neither: remove them). ``mode`` is
    "", "amortize" or "forget".
    """
    rep = pb.Replacement(tokens=list(tokens or ()), text=text)
    return pb.Directive(
        splice=pb.Splice(session=session, start=start, end=end, replacement=rep, mode=mode)
    )


def pin(session: str, end: int, ttl: TTLValue | None = None) -> pb.Directive:
    """Pin: pin a session's prefix ``[0, end)`` for ``ttl``."""
    m = pb.Pin(session=session, end=end)
    _set_ttl(m, "ttl", ttl)
    return pb.Directive(pin=m)


def retain(
    session: str, start: int, end: int, priority: int, duration: TTLValue | None = None
) -> pb.Directive:
    """Retain: keep ``[start, end)`` of a session at ``priority`` (0-100)."""
    m = pb.Retain(session=session, start=start, end=end, priority=priority)
    _set_ttl(m, "duration", duration)
    return pb.Directive(retain=m)


def evict(session: str, start: int, end: int, mode: str = "") -> pb.Directive:
    """Evict: drop ``[start, end)`` of a session from the cache."""
    return pb.Directive(evict=pb.Evict(session=session, start=start, end=end, mode=mode))


def resume(lease_id: str) -> pb.Directive:
    """Resume: bring a paused session back (warm it)."""
    return pb.Directive(resume=pb.Resume(lease_id=lease_id))


def share(session: str, end: int, scope: str = "") -> pb.Directive:
    """Share: make a session's prefix ``[0, end)`` reusable by the tenant
    (``scope="tenant"``) or every tenant (``"global"``).
    """
    return pb.Directive(share=pb.Share(session=session, end=end, scope=scope))


def verb_of(d: pb.Directive) -> str:
    """The wire name of a directive's verb ("Pin"), or "" when none is set."""
    field = d.WhichOneof("verb")
    return _FIELD_TO_VERB.get(field, "") if field else ""


def _need(d: Mapping[str, Any], key: str, verb: str) -> Any:
    if key not in d:
        raise MissingField(f"{verb}.{key}")
    return d[key]


def from_dict(d: Mapping[str, Any]) -> pb.Directive:
    """A directive from its JSON command form or a proto-shaped dict.

    ``{"type": "Pin", "session": "s", "end": 64, "ttl": "5m"}`` (the NATS
    and docs form: TTLs ``ttl_seconds``/``new_ttl_seconds`` for block verbs,
    ``ttl``/``duration`` for span verbs), or ``{"pin": {...}}`` (the proto's
    field names, durations as ``"300s"``).
    """
    if "type" not in d:
        if len(d) == 1 and next(iter(d)) in _FIELD_TO_VERB:
            msg = pb.Directive()
            try:
                json_format.ParseDict(dict(d), msg)
            except json_format.ParseError as e:
                raise BadRequest(str(e)) from None
            return msg
        raise MissingField('type (or one proto verb field such as "pin")')
    verb = d["type"]
    rest = {k: v for k, v in d.items() if k != "type"}
    allowed: dict[str, set[str]] = {
        "Warm": {"block_keys", "target_tier"},
        "Prune": {"after_block_hash"},
        "Cache": {"block_hashes", "pin", "ttl_seconds"},
        "Think": {"block_hashes", "transient"},
        "Pause": {"block_hashes", "ttl_seconds", "lease_id"},
        "RenewLease": {"lease_id", "new_ttl_seconds"},
        "RevokeLease": {"lease_id"},
        "Splice": {"session", "start", "end", "replacement", "mode"},
        "Pin": {"session", "end", "ttl"},
        "Retain": {"session", "start", "end", "priority", "duration"},
        "Evict": {"session", "start", "end", "mode"},
        "Resume": {"lease_id"},
        "Share": {"session", "end", "scope"},
    }
    if verb not in allowed:
        raise UnknownVerb(f"{verb!r}: want one of {', '.join(VERBS)}")
    unknown = set(rest) - allowed[verb]
    if unknown:
        raise BadRequest(f"{verb}: unknown field(s) {', '.join(sorted(unknown))}")
    if verb == "Warm":
        return warm(rest.get("block_keys", []), rest.get("target_tier", ""))
    if verb == "Prune":
        return prune(_need(rest, "after_block_hash", verb))
    if verb == "Cache":
        return cache(
            rest.get("block_hashes", []), bool(_need(rest, "pin", verb)), rest.get("ttl_seconds")
        )
    if verb == "Think":
        return think(rest.get("block_hashes", []), bool(_need(rest, "transient", verb)))
    if verb == "Pause":
        return pause(
            rest.get("block_hashes", []), rest.get("ttl_seconds"), rest.get("lease_id", "")
        )
    if verb == "RenewLease":
        return renew_lease(rest.get("lease_id", ""), _need(rest, "new_ttl_seconds", verb))
    if verb == "RevokeLease":
        return revoke_lease(rest.get("lease_id", ""))
    if verb == "Splice":
        rep = rest.get("replacement") or {}
        return splice(
            rest.get("session", ""),
            int(_need(rest, "start", verb)),
            int(_need(rest, "end", verb)),
            tokens=rep.get("tokens"),
            text=rep.get("text", ""),
            mode=rest.get("mode", ""),
        )
    if verb == "Pin":
        return pin(rest.get("session", ""), int(_need(rest, "end", verb)), rest.get("ttl"))
    if verb == "Retain":
        return retain(
            rest.get("session", ""),
            int(rest.get("start", 0)),
            int(_need(rest, "end", verb)),
            int(_need(rest, "priority", verb)),
            rest.get("duration"),
        )
    if verb == "Evict":
        return evict(
            rest.get("session", ""),
            int(_need(rest, "start", verb)),
            int(_need(rest, "end", verb)),
            rest.get("mode", ""),
        )
    if verb == "Resume":
        return resume(rest.get("lease_id", ""))
    return share(rest.get("session", ""), int(_need(rest, "end", verb)), rest.get("scope", ""))


def to_directive(d: pb.Directive | Mapping[str, Any]) -> pb.Directive:
    """A Directive message, or a dict converted with ``from_dict``."""
    if isinstance(d, pb.Directive):
        return d
    if isinstance(d, Mapping):
        return from_dict(d)
    raise BadRequest(f"directive of type {type(d).__name__}: want a Directive message or a dict")
