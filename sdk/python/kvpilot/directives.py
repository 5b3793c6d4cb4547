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

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import json_format

from kvpilot import _verbs
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

#: Wire names of the verbs ("type" tags) and their proto oneof fields, in wire
#: order (generated from the Go definitions: kvpilot._verbs).
VERBS: dict[str, str] = {name: v.field for name, v in _verbs.VERBS.items()}
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
    recompute_first: int = 0,
    recompute_share: float = 0.0,
    max_kl: float = 0.0,
) -> pb.Directive:
    """Splice: replace token positions ``[start, end)`` of a session's cached
    sequence by ``tokens`` or ``text`` (neither: remove them). ``mode`` is
    "", "amortize" or "forget".

    The recompute arguments ask for kept tokens to be prefilled again with
    the edited context (amortize only; any of them set overrides the host's
    ``splice.recompute`` and ``splice.max_kl``): the first
    ``recompute_first`` tokens after each edit, a ``recompute_share`` of the
    kept tokens after the first edit chosen by the engine's staleness
    signal, and the quality guard's budget ``max_kl`` (mean KL per token
    against a re-prefill).
    """
    rep = pb.Replacement(tokens=list(tokens or ()), text=text)
    m = pb.Splice(session=session, start=start, end=end, replacement=rep, mode=mode)
    if recompute_first or recompute_share or max_kl:
        m.recompute.CopyFrom(
            pb.Recompute(first=recompute_first, share=recompute_share, max_kl=max_kl)
        )
    return pb.Directive(splice=m)


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


def from_dict(d: Mapping[str, Any]) -> pb.Directive:
    """A directive from its JSON command form or a proto-shaped dict.

    ``{"type": "Pin", "session": "s", "end": 64, "ttl": "5m"}`` (the NATS
    and docs form: TTLs ``ttl_seconds``/``new_ttl_seconds`` for block verbs,
    ``ttl``/``duration`` for span verbs), or ``{"pin": {...}}`` (the proto's
    field names, durations as ``"300s"``). The JSON form is held to what the
    host's strict decoder accepts (kvpilot._verbs, generated from it): no
    unknown field, every required one present.
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
    name = d["type"]
    verb = _verbs.VERBS.get(name) if isinstance(name, str) else None
    if verb is None:
        raise UnknownVerb(f"{name!r}: want one of {', '.join(VERBS)}")
    rest = {k: v for k, v in d.items() if k != "type"}
    unknown = set(rest) - {f.json for f in verb.fields}
    if unknown:
        raise BadRequest(f"{name}: unknown field(s) {', '.join(sorted(unknown))}")
    absent = [f"{name}.{f.json}" for f in verb.fields if f.required and f.json not in rest]
    if absent:
        raise MissingField(" and ".join(absent))
    msg = getattr(pb, name)()
    for f in verb.fields:
        if f.json in rest and rest[f.json] is not None:
            try:
                _READERS[f.kind](msg, f.proto, rest[f.json])
            except (TypeError, ValueError) as e:
                raise BadRequest(f"{name}.{f.json}: {e}") from None
    return pb.Directive(**{verb.field: msg})


def _read_int(msg: Any, field: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{v!r} is not an integer")
    setattr(msg, field, v)


def _read_str(msg: Any, field: str, v: Any) -> None:
    if not isinstance(v, str):
        raise TypeError(f"{v!r} is not a string")
    setattr(msg, field, v)


def _read_bool(msg: Any, field: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise TypeError(f"{v!r} is not true or false")
    setattr(msg, field, v)


def _read_replacement(msg: Any, field: str, v: Any) -> None:
    if not isinstance(v, Mapping):
        raise TypeError(f"{v!r} is not an object with tokens or text")
    extra = set(v) - {"tokens", "text"}
    if extra:
        raise ValueError(f"unknown field(s) {', '.join(sorted(extra))}")
    rep = getattr(msg, field)
    rep.tokens.extend(v.get("tokens") or ())
    rep.text = v.get("text") or ""


def _read_recompute(msg: Any, field: str, v: Any) -> None:
    if not isinstance(v, Mapping):
        raise TypeError(f"{v!r} is not an object of first, share and max_kl")
    extra = set(v) - {"first", "share", "max_kl"}
    if extra:
        raise ValueError(f"unknown field(s) {', '.join(sorted(extra))}")
    rc = getattr(msg, field)
    rc.SetInParent()
    _read_int(rc, "first", v.get("first", 0))
    for k in ("share", "max_kl"):
        x = v.get(k, 0.0)
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"{k} {x!r} is not a number")
        setattr(rc, k, float(x))


def _read_block_keys(msg: Any, field: str, v: Any) -> None:
    getattr(msg, field).extend(str(k) for k in v)


_READERS: dict[str, Callable[[Any, str, Any], None]] = {
    "hash": lambda m, f, v: setattr(m, f, hash_value(v)),
    "hashes": lambda m, f, v: getattr(m, f).extend(_hashes(v)),
    "ttl": _set_ttl,
    "replacement": _read_replacement,
    "block_keys": _read_block_keys,
    "recompute": _read_recompute,
    "str": _read_str,
    "int": _read_int,
    "bool": _read_bool,
}


def to_directive(d: pb.Directive | Mapping[str, Any]) -> pb.Directive:
    """A Directive message, or a dict converted with ``from_dict``."""
    if isinstance(d, pb.Directive):
        return d
    if isinstance(d, Mapping):
        return from_dict(d)
    raise BadRequest(f"directive of type {type(d).__name__}: want a Directive message or a dict")
