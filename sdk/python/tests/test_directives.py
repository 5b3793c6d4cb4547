"""kvpilot.directives and kvpilot.ttl: building directives, parsing TTLs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kvpilot import directives as d
from kvpilot.errors import BadRequest, InvalidHash, InvalidTTL, MissingField, UnknownVerb
from kvpilot.ttl import parse_seconds, to_duration


@pytest.mark.parametrize(
    ("value", "secs"),
    [
        (300, 300.0),
        (1.5, 1.5),
        ("45", 45.0),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        (timedelta(minutes=2), 120.0),
        (0, 0.0),
    ],
)
def test_parse_seconds(value, secs) -> None:
    assert parse_seconds(value) == pytest.approx(secs)


@pytest.mark.parametrize("value", ["", "5x", "m5", "-1", -3, "1h-", float("nan"), 1e12, True, [1]])
def test_parse_seconds_refuses(value) -> None:
    with pytest.raises(InvalidTTL) as e:
        parse_seconds(value)
    assert e.value.hint


def test_to_duration() -> None:
    assert to_duration(None) is None
    dur = to_duration("1.25s")
    assert (dur.seconds, dur.nanos) == (1, 250_000_000)


def test_hash_value() -> None:
    assert d.hash_value(5) == 5
    assert d.hash_value(-1) == (1 << 64) - 1
    assert d.hash_value("0x10") == 16 and d.hash_value("18446744073709551615") == (1 << 64) - 1
    for bad in ["zz", 1 << 64, "0x1" + "0" * 16, True, 1.5j]:
        with pytest.raises(InvalidHash):
            d.hash_value(bad)


def test_constructors() -> None:
    m = d.pin("s", end=64, ttl="5m")
    assert d.verb_of(m) == "Pin" and m.pin.end == 64 and m.pin.ttl.seconds == 300
    m = d.splice("s", 4, 9, tokens=[1, 2], mode="forget")
    assert m.splice.replacement.tokens == [1, 2] and m.splice.mode == "forget"
    assert not m.splice.HasField("recompute")
    m = d.splice("s", 4, 9, recompute_first=64, max_kl=0.005)
    rc = m.splice.recompute
    assert (rc.first, rc.share, rc.max_kl) == (64, 0.0, 0.005)
    m = d.from_dict({"type": "Splice", "session": "s", "start": 4, "end": 9,
                     "recompute": {"share": 0.25}})  # fmt: skip
    assert m.splice.recompute.share == 0.25
    with pytest.raises(BadRequest):
        d.from_dict({"type": "Splice", "session": "s", "start": 4, "end": 9,
                     "recompute": {"firts": 3}})  # fmt: skip
    m = d.pause(["0x1", 2], lease_id="l")
    assert list(m.pause.block_hashes) == [1, 2] and not m.pause.HasField("ttl")
    assert d.renew_lease("l", 60).renew_lease.new_ttl.seconds == 60
    assert d.verb_of(d.share("s", 8, "global")) == "Share"


@pytest.mark.parametrize(
    "cmd",
    [
        {"type": "Warm", "block_keys": ["abc"], "target_tier": "CPU_TIER1"},
        {"type": "Prune", "after_block_hash": "0x5"},
        {"type": "Cache", "block_hashes": [1], "pin": True, "ttl_seconds": 300},
        {"type": "Think", "block_hashes": [3], "transient": True},
        {"type": "Pause", "block_hashes": [4], "ttl_seconds": "1h", "lease_id": "l1"},
        {"type": "RenewLease", "lease_id": "l1", "new_ttl_seconds": 7200},
        {"type": "RevokeLease", "lease_id": "l1"},
        {"type": "Splice", "session": "s", "start": 4, "end": 9, "replacement": {"text": "[cut]"}},
        {"type": "Pin", "session": "s", "end": 64, "ttl": "1m"},
        {"type": "Retain", "session": "s", "start": 1, "end": 64, "priority": 70, "duration": 60},
        {"type": "Evict", "session": "s", "start": 10, "end": 20, "mode": "amortize"},
        {"type": "Resume", "lease_id": "l1"},
        {"type": "Share", "session": "s", "end": 64, "scope": "global"},
    ],
    ids=lambda c: c["type"],
)
def test_from_dict_every_verb(cmd) -> None:
    m = d.from_dict(cmd)
    assert d.verb_of(m) == cmd["type"]
    assert d.to_directive(m) is m


def test_from_dict_proto_shape() -> None:
    m = d.from_dict({"pin": {"session": "s", "end": "64", "ttl": "300s"}})
    assert m.pin.end == 64 and m.pin.ttl.seconds == 300


@pytest.mark.parametrize(
    ("cmd", "err"),
    [
        ({"type": "Nope"}, UnknownVerb),
        ({"session": "s"}, MissingField),
        ({"type": "Cache", "block_hashes": [1]}, MissingField),
        ({"type": "Pin", "session": "s", "end": 1, "extra": 1}, BadRequest),
        ({"pin": {"bogus": 1}}, BadRequest),
        # As the host's strict decoder (kvpilot._verbs is generated from it):
        # a required field absent, a value of the wrong JSON type.
        ({"type": "Retain", "session": "s", "end": 64, "priority": 70}, MissingField),
        ({"type": "Splice", "session": "s", "start": "4", "end": 9}, BadRequest),
        (
            {"type": "Splice", "session": "s", "start": 4, "end": 9, "replacement": {"x": 1}},
            BadRequest,
        ),
        ({"type": "Think", "block_hashes": [3], "transient": 1}, BadRequest),
    ],
)
def test_from_dict_refuses(cmd, err) -> None:
    with pytest.raises(err):
        d.from_dict(cmd)
