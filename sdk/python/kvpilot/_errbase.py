"""The exception hierarchy of kvpilot's error registry.

KvpilotError is the root; one family class per number group (1xxx ... 9xxx)
sits under it, and the generated per-code classes (kvpilot._errcodes) under
the families. Import them from kvpilot.errors.
"""

from __future__ import annotations

from typing import Any, ClassVar


class KvpilotError(Exception):
    """An error from kvpilot's registry (sdk/errcode).

    Attributes:
        code: the stable string code, e.g. ``"unknown_block"``; switch on it.
        number: the stable number, e.g. 3001.
        message: the fixed message of the code.
        hint: what the caller can do about it.
        detail: the specifics (which hash, which field, which socket).
        index: the directive of a turn it concerns, or -1.
        grpc_code: the numeric gRPC status code the error travels under.

    ``str(e)`` reads ``[directive N: ]code: message[: detail] (hint: ...)``.
    A code this client does not know (a newer host) keeps its code, number,
    message and hint and is raised as its number's family class.
    """

    code: ClassVar[str] = ""
    number: ClassVar[int] = 0
    grpc_code: ClassVar[int] = 2  # UNKNOWN
    message: ClassVar[str] = "kvpilot error"
    hint: ClassVar[str] = ""

    def __init__(
        self,
        detail: str = "",
        *,
        index: int = -1,
        code: str | None = None,
        number: int | None = None,
        message: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.index = index
        # Instance overrides shadow the class's registry values: a code
        # unknown here keeps what the host said about it.
        if code is not None:
            self.code = code  # type: ignore[misc]
        if number is not None:
            self.number = number  # type: ignore[misc]
        if message is not None:
            self.message = message  # type: ignore[misc]
        if hint is not None:
            self.hint = hint  # type: ignore[misc]

    def __str__(self) -> str:
        s = f"{self.code or 'error'}: {self.message}"
        if self.index >= 0:
            s = f"directive {self.index}: {s}"
        if self.detail:
            s += f": {self.detail}"
        if self.hint:
            s += f" (hint: {self.hint})"
        return s

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, detail={self.detail!r}, index={self.index})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the overrides and index across pickling (multiprocessing).
        return (
            _rebuild,
            (type(self), self.detail, self.index, self.code, self.number, self.message, self.hint),
        )

    def to_dict(self) -> dict[str, Any]:
        """The registry's JSON form: code, number, message, hint, detail, index."""
        out: dict[str, Any] = {"code": self.code, "number": self.number, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        if self.detail:
            out["detail"] = self.detail
        if self.index >= 0:
            out["index"] = self.index
        return out


def _rebuild(
    cls: type[KvpilotError],
    detail: str,
    index: int,
    code: str,
    number: int,
    message: str,
    hint: str,
) -> KvpilotError:
    return cls(detail, index=index, code=code, number=number, message=message, hint=hint)


class MalformedError(KvpilotError):
    """1xxx: the request itself is malformed (JSON, sizes, unknown verbs)."""

    number = 1000
    grpc_code = 3


class InvalidError(KvpilotError):
    """2xxx: the request is well formed but a value is invalid."""

    number = 2000
    grpc_code = 3


class NotFoundError(KvpilotError):
    """3xxx: it names something the host does not have (or not in that state)."""

    number = 3000
    grpc_code = 5


class ExhaustedError(KvpilotError):
    """4xxx: a budget, quota, rate or capacity was exhausted."""

    number = 4000
    grpc_code = 8


class NotAllowedError(KvpilotError):
    """5xxx: who is asking is not allowed to."""

    number = 5000
    grpc_code = 7


class UnavailableError(KvpilotError):
    """6xxx: the host cannot do it, yet or right now (down, deadline, conflict)."""

    number = 6000
    grpc_code = 14


class InternalError(KvpilotError):
    """9xxx: kvpilot's own fault; report it with the detail."""

    number = 9000
    grpc_code = 13


#: The family class of each number group (number // 1000).
FAMILIES: dict[int, type[KvpilotError]] = {
    1: MalformedError,
    2: InvalidError,
    3: NotFoundError,
    4: ExhaustedError,
    5: NotAllowedError,
    6: UnavailableError,
    9: InternalError,
}
