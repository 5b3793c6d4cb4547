"""Serving on when kvpilot is down, slow or misbehaving.

An engine integration (the vLLM connector, the SGLang storage backend) makes
its engine faster; it must never make it fail. Every call to the host goes
through HostHealth: a host that cannot be reached (down, slow past the call
timeout, restarting) is left alone for a while, doubling up to a minute, and
the engine serves without kvpilot meanwhile (no hits, no saves). Failures are
logged once per streak, and errors that concern one request once per kind,
so a dead host does not flood the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kvpilot.errors import DeadlineExceeded, HostRestarted, KvpilotError, Unavailable

_MAX_BACKOFF_S = 60.0


def host_down(err: BaseException) -> bool:
    """Whether err says the host is unreachable or too slow, not that one
    request was refused.
    """
    return isinstance(err, (Unavailable, DeadlineExceeded)) and not isinstance(err, HostRestarted)


class HostHealth:
    """Whether the connector should call the host now.

    ``usable()`` is False during a back-off after a failure the host is to
    blame for; ``failed(what, err)`` records a failure and logs it the first
    time in a streak; ``ok()`` ends a streak.
    """

    def __init__(
        self,
        role: str,
        retry_after_s: float,
        log: logging.Logger,
        clock: Callable[[], float] = time.monotonic,
        *,
        integration: str = "kvpilot connector",
        engine: str = "vLLM",
    ) -> None:
        self.role = role
        # How messages name the integration and the engine it serves.
        self._who = f"{integration} ({role})"
        self._engine = engine
        self.retry_after_s = retry_after_s
        self.log = log
        self._clock = clock
        self._lock = threading.Lock()
        self._until = 0.0
        self._backoff = retry_after_s
        self._streak = 0
        self._seen: set[tuple[str, str]] = set()
        #: Failed calls since start, by cause: "down" (host unreachable or
        #: slow), "refused" (an error about one request), "bug" (anything else).
        self.failures = {"down": 0, "refused": 0, "bug": 0}

    def usable(self) -> bool:
        """Whether to call the host now (not backing off)."""
        with self._lock:
            return self._clock() >= self._until

    def ok(self) -> None:
        """A call succeeded: the host is back if it was gone."""
        with self._lock:
            if self._streak == 0:
                return
            streak, self._streak = self._streak, 0
            self._backoff = self.retry_after_s
            self._until = 0.0
        self.log.info("%s: the kvpilot host answers again after %d failed calls", self._who, streak)

    def failed(self, what: str, err: BaseException, *, quiet: bool = False) -> None:
        """Records a failed call; backs off when the host is to blame.
        ``quiet``: a refusal the caller logs itself is only counted here (a
        host that is down is logged here all the same).
        """
        if host_down(err):
            self.failures["down"] += 1
            with self._lock:
                self._streak += 1
                first = self._streak == 1
                wait = self._backoff
                self._until = self._clock() + wait
                self._backoff = min(max(self._backoff, 0.05) * 2, _MAX_BACKOFF_S)
            if first:
                self.log.warning(
                    "%s: %s failed: %s; %s serves without kvpilot and tries the host again "
                    "in %.1fs",
                    self._who,
                    what,
                    err,
                    self._engine,
                    wait,
                )
            else:
                self.log.debug("%s: %s failed: %s", self._who, what, err)
            return
        known = isinstance(err, KvpilotError)
        self.failures["refused" if known else "bug"] += 1
        if quiet:
            return
        key = (what, getattr(err, "code", "") or type(err).__name__)
        with self._lock:
            first = key not in self._seen
            self._seen.add(key)
        if first:
            self.log.warning(
                "%s: %s failed: %s (the request goes on without kvpilot; further failures "
                "of this kind are logged at debug level)",
                self._who,
                what,
                err,
                exc_info=not known,
            )
        else:
            self.log.debug("%s: %s failed: %s", self._who, what, err)
