"""Time-to-live values as every kvpilot front end accepts them (Go: sdk/ttl).

A TTL is seconds (a number, fractions allowed, or a numeric string such as
``"45"``), a duration string with units (``"30s"``, ``"5m"``, ``"1h30m"``,
``"500ms"``), or a ``datetime.timedelta``. Zero means the host's default.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from google.protobuf import duration_pb2

from kvpilot.errors import InvalidTTL

#: The longest TTL kvpilot accepts: 10 years (longer is a unit mistake).
MAX_SECONDS = 10 * 365 * 24 * 3600

TTLValue = float | int | str | timedelta

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_NUMBER = re.compile(r"[0-9.+-]+")


def parse_seconds(value: TTLValue) -> float:
    """A TTL in seconds; raises InvalidTTL (negative, overlong, unparseable)."""
    if isinstance(value, timedelta):
        secs = value.total_seconds()
    elif isinstance(value, bool):
        raise InvalidTTL(f"{value!r}: want seconds or a duration string")
    elif isinstance(value, (int, float)):
        secs = float(value)
    elif isinstance(value, str):
        secs = _parse_string(value.strip())
    else:
        raise InvalidTTL(f"{value!r}: want seconds, a duration string or a timedelta")
    if math.isnan(secs) or secs < 0 or secs > MAX_SECONDS:
        raise InvalidTTL(f"{value!r}: want 0 (default) up to 10 years")
    return secs


def _parse_string(s: str) -> float:
    if not s:
        raise InvalidTTL('empty string; write seconds ("300") or a duration ("30s", "5m", "1h")')
    if _NUMBER.fullmatch(s):
        try:
            return float(s)
        except ValueError:
            raise InvalidTTL(f"{s!r} is not a number of seconds") from None
    sign = 1.0
    body = s
    if body[0] in "+-":
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    total, pos = 0.0, 0
    for m in _PART.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(body) or pos == 0:
        raise InvalidTTL(f'{s!r}: want seconds ("300") or a duration ("30s", "5m", "1h")')
    return sign * total


def to_duration(value: TTLValue | None) -> duration_pb2.Duration | None:
    """A TTL as a protobuf Duration; None stays None (absent: the default)."""
    if value is None:
        return None
    secs = parse_seconds(value)
    whole = math.floor(secs)
    nanos = round((secs - whole) * 1e9)
    if nanos >= 1_000_000_000:
        whole, nanos = whole + 1, nanos - 1_000_000_000
    return duration_pb2.Duration(seconds=whole, nanos=nanos)


def from_duration(d: duration_pb2.Duration) -> float:
    """A protobuf Duration in seconds."""
    return d.seconds + d.nanos / 1e9
