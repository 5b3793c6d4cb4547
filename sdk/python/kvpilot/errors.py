"""Errors a kvpilot client can see: the registry of sdk/errcode in Python.

Every error the host sends has a stable code (``"unknown_block"``) and number
(3001), a fixed message and a hint. Each code is a class (``UnknownBlock``)
under its family (``NotFoundError`` for 3xxx) under ``KvpilotError``, so
callers catch as narrowly as they like::

    try:
        client.allocate(req, 4)
    except kvpilot.errors.HostRestarted:
        ...  # run the request again from match
    except kvpilot.errors.ExhaustedError as e:
        log.warning("%s (%s)", e.detail, e.hint)

The per-code classes are generated from the Go registry (see
``sdk/errcode/python_test.go``); ``error_for`` builds one by code,
``from_rpc_error``, ``from_status`` and ``from_proto`` convert what gRPC
delivers.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import grpc

from kvpilot._errbase import (
    FAMILIES,
    ExhaustedError,
    InternalError,
    InvalidError,
    KvpilotError,
    MalformedError,
    NotAllowedError,
    NotFoundError,
    UnavailableError,
)
from kvpilot._errcodes import (
    BY_GRPC_STATUS,
    REGISTRY,
    BadRequest,
    BlockLocked,
    CapacityExhausted,
    DeadlineExceeded,
    Internal,
    InvalidHash,
    InvalidLayout,
    InvalidLeaseID,
    InvalidPriority,
    InvalidSlot,
    InvalidSpan,
    InvalidTier,
    InvalidTTL,
    LayoutConflict,
    LeaseExists,
    Misconfigured,
    MissingField,
    NotSupportedYet,
    OverlappingSpans,
    PayloadTooLarge,
    PermissionDenied,
    PinBudgetExhausted,
    PromptTooLong,
    RateLimited,
    RecomputeUnsupported,
    SinkProtected,
    TenantMismatch,
    TenantQuotaExhausted,
    TooMany,
    TurnAborted,
    Unavailable,
    UnknownBlock,
    UnknownLease,
    UnknownRegistration,
    UnknownRequest,
    UnknownSession,
    UnknownVerb,
    WrongTransport,
    WrongWorker,
)

if TYPE_CHECKING:
    from kvpilot.v1 import common_pb2

__all__ = [
    "FAMILIES",
    "REGISTRY",
    "BadRequest",
    "BlockLocked",
    "CapacityExhausted",
    "DeadlineExceeded",
    "ExhaustedError",
    "HostRestarted",
    "Internal",
    "InternalError",
    "InvalidError",
    "InvalidHash",
    "InvalidLayout",
    "InvalidLeaseID",
    "InvalidPriority",
    "InvalidSlot",
    "InvalidSpan",
    "InvalidTTL",
    "InvalidTier",
    "KvpilotError",
    "LayoutConflict",
    "LeaseExists",
    "MalformedError",
    "Misconfigured",
    "MissingField",
    "NotAllowedError",
    "NotFoundError",
    "NotSupportedYet",
    "OverlappingSpans",
    "PayloadTooLarge",
    "PermissionDenied",
    "PinBudgetExhausted",
    "PromptTooLong",
    "RateLimited",
    "RecomputeUnsupported",
    "SinkProtected",
    "TenantMismatch",
    "TenantQuotaExhausted",
    "TooMany",
    "TurnAborted",
    "Unavailable",
    "UnavailableError",
    "UnknownBlock",
    "UnknownLease",
    "UnknownRegistration",
    "UnknownRequest",
    "UnknownSession",
    "UnknownVerb",
    "WrongTransport",
    "WrongWorker",
    "error_for",
    "from_proto",
    "from_rpc_error",
    "from_status",
    "is_transient",
    "parse_status_message",
]


class HostRestarted(UnknownRegistration):
    """The host restarted (or the engine re-registered) during a request.

    The request's slots and locks are gone; the client has already
    registered again. Run the request again from ``match`` (``EngineClient.
    run_request`` does this). It is an ``UnknownRegistration``, so its code
    is ``unknown_registration``; ``detail`` carries the host's error.
    """

    message = "the host restarted during the request"
    hint = "run the request again from match (EngineClient.run_request does this)"


# Show the classes as kvpilot.errors.X in tracebacks and help(), where
# users import them from.
for _cls in (*REGISTRY.values(), *FAMILIES.values(), KvpilotError, HostRestarted):
    _cls.__module__ = __name__


def error_for(code: str, detail: str = "", *, index: int = -1) -> KvpilotError:
    """The registry exception for code with the given detail.

    An unregistered code reads as ``Internal`` (keeping the code), as in Go.
    """
    cls = REGISTRY.get(code)
    if cls is None:
        return Internal(detail, index=index, code=code)
    return cls(detail, index=index)


def from_proto(msg: common_pb2.Error | None) -> KvpilotError | None:
    """Converts a kvpilot.v1.Error message; None (or an empty one) is None.

    A code this client does not know keeps the host's number, message and
    hint, as an instance of its number's family class.
    """
    if msg is None or not msg.code:
        return None
    index = msg.index
    cls = REGISTRY.get(msg.code)
    if cls is not None:
        return cls(msg.detail, index=index)
    family = FAMILIES.get(msg.number // 1000, InternalError)
    return family(
        msg.detail,
        index=index,
        code=msg.code,
        number=msg.number,
        message=msg.message or None,
        hint=msg.hint or None,
    )


_DIRECTIVE_PREFIX = re.compile(r"directive (\d+): ")

# Registry codes longest first, so no code matches as the prefix of another.
_CODES_BY_LENGTH = sorted(REGISTRY, key=len, reverse=True)


def parse_status_message(message: str) -> KvpilotError | None:
    """Reads a registry error from a gRPC status message.

    The host writes ``[directive N: ]code: message[: detail]`` (Go's
    ``convert.GRPCStatus``); None when message does not start with a code.
    """
    index = -1
    rest = message
    m = _DIRECTIVE_PREFIX.match(rest)
    if m:
        index = int(m.group(1))
        rest = rest[m.end() :]
    for code in _CODES_BY_LENGTH:
        if rest == code or rest.startswith(code + ": "):
            cls = REGISTRY[code]
            body = rest[len(code) + 2 :]
            if body == cls.message:
                body = ""
            elif body.startswith(cls.message + ": "):
                body = body[len(cls.message) + 2 :]
            return cls(body, index=index)
    return None


def from_status(grpc_code: int, message: str) -> KvpilotError:
    """Reads a registry error from a gRPC status: its numeric code and message.

    Registry errors travel in the message (``parse_status_message``);
    anything else is the transport's own failure and maps by status code
    (``BY_GRPC_STATUS``, generated from the registry's ``grpc_fallback``:
    unavailable and cancelled to ``Unavailable``, deadline to
    ``DeadlineExceeded``, permission to ``PermissionDenied``, resource
    exhaustion to ``RateLimited``), ``Internal`` otherwise, with the whole
    message as the detail. Go's ``errcode.FromStatus`` reads the same way.
    """
    parsed = parse_status_message(message)
    if parsed is not None:
        return parsed
    return BY_GRPC_STATUS.get(grpc_code, Internal)(message)


def from_rpc_error(err: grpc.RpcError) -> KvpilotError:
    """Converts a gRPC error raised by a kvpilot call (``from_status``)."""
    value, message = 2, str(err)  # UNKNOWN: what is not a call reads as Internal
    if isinstance(err, grpc.Call):
        code = err.code()
        if code is not None:
            value = code.value[0]
        message = err.details() or message
    out = from_status(value, message)
    out.__cause__ = err
    return out


def is_transient(err: BaseException) -> bool:
    """Whether running the request again may succeed: the host restarted
    during it, or the host is (briefly) unavailable.
    """
    return isinstance(err, (HostRestarted, Unavailable))
