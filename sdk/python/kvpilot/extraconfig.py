"""Checking an engine's extra config for a kvpilot integration.

vLLM (``kv_connector_extra_config``) and SGLang
(``--hicache-storage-backend-extra-config``) both hand an integration a JSON
object of settings. These read one key each and call ``fail(key, value,
want)`` for the exception to raise, so each integration words its messages
with the flag its users set.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

#: Builds the exception for a bad value: the key, the value, what is wanted.
Fail = Callable[[str, Any, str], Exception]


def first_unknown(extra: Mapping[str, Any], known: Collection[str]) -> str | None:
    """The first key (in sorted order) that is not in ``known``, or None."""
    return next(iter(sorted(k for k in extra if k not in known)), None)


def number(
    extra: Mapping[str, Any],
    key: str,
    default: float,
    low: float,
    high: float,
    fail: Fail,
    *,
    whole: bool = False,
) -> float:
    """The number at key (default when absent), within [low, high]; with
    ``whole``, a whole number.
    """
    v = extra.get(key, default)
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or not low <= v <= high
        or (whole and v != int(v))
    ):
        kind = "a whole number" if whole else "a number"
        raise fail(key, v, f"{kind} in [{low:g}, {high:g}]")
    return float(v)


def string(extra: Mapping[str, Any], key: str, fail: Fail) -> str:
    """The string at key, stripped ("" when absent)."""
    v = extra.get(key, "")
    if not isinstance(v, str):
        raise fail(key, v, "a string")
    return v.strip()


def flag(extra: Mapping[str, Any], key: str, fail: Fail) -> bool:
    """The boolean at key (False when absent)."""
    v = extra.get(key, False)
    if not isinstance(v, bool):
        raise fail(key, v, "true or false")
    return v
