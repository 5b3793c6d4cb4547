"""The descriptor side channel (Go: sdk/enginewire/fds.go, engineclient/fds.go).

gRPC cannot carry file descriptors, so after Register the engine connects to
the host's descriptor socket (``RegisterResponse.fd_socket``) and claims the
registration's memfds with its one-time token::

    engine -> host: b"KVPFD001" + token (16 bytes)
    host -> engine: b"KVPFD001" + u32 LE count [+ refusal reason when 0],
                    with count descriptors attached (SCM_RIGHTS), in the
                    order of the memfd entries of RegisterResponse.pools
"""

from __future__ import annotations

import os
import socket
import struct

FD_MAGIC = b"KVPFD001"
FD_TOKEN_LEN = 16
#: Bounds a reply's payload.
FD_REPLY_MAX = 512
# Descriptors one reply may carry (the Go client makes room for 16).
_MAX_FDS = 16


class FDProtocolError(Exception):
    """The descriptor channel's messages were malformed or the host refused."""


def encode_request(token: bytes) -> bytes:
    """The engine's claim: magic and token."""
    return FD_MAGIC + token


def decode_reply(payload: bytes) -> tuple[int, str]:
    """The count of descriptors and the refusal reason of a host reply."""
    n = len(FD_MAGIC)
    if len(payload) < n + 4 or payload[:n] != FD_MAGIC:
        raise FDProtocolError(
            f"engine descriptor channel: protocol error: reply of {len(payload)} bytes"
        )
    (count,) = struct.unpack_from("<I", payload, n)
    return count, payload[n + 4 :].decode("utf-8", "replace")


def claim_fds(path: str, token: bytes, want: int, timeout: float = 10.0) -> list[int]:
    """Claims a registration's memfd descriptors from the host.

    Returns ``want`` descriptors (close-on-exec), which the caller owns and
    closes. Raises FDProtocolError when the host refuses (the reason is in
    the message) or the reply does not carry ``want`` descriptors, and
    OSError when the socket cannot be reached.
    """
    fds: list[int] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(path)
            s.sendall(encode_request(token))
            payload, fds, _, _ = socket.recv_fds(s, FD_REPLY_MAX, _MAX_FDS)
        except OSError as e:
            raise OSError(e.errno, f"descriptor socket {path}: {e.strerror or e}") from e
    try:
        for fd in fds:
            os.set_inheritable(fd, False)
        count, reason = decode_reply(payload)
        if count != len(fds):
            raise FDProtocolError(
                f"engine descriptor channel: protocol error: reply says {count} "
                f"descriptors, {len(fds)} arrived"
            )
        if count == 0 and want > 0:
            raise FDProtocolError(f"host refused the descriptor claim: {reason}")
        if count != want:
            raise FDProtocolError(
                f"engine descriptor channel: protocol error: {count} descriptors "
                f"for {want} memfd pools"
            )
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds
