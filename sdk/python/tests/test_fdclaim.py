"""kvpilot.fdclaim: the descriptor side channel's wire format and refusals."""

from __future__ import annotations

import struct

import pytest

from kvpilot.fdclaim import FD_MAGIC, FDProtocolError, claim_fds, decode_reply, encode_request


def test_wire_format() -> None:
    tok = bytes(range(16))
    assert encode_request(tok) == b"KVPFD001" + tok
    assert decode_reply(FD_MAGIC + struct.pack("<I", 2)) == (2, "")
    assert decode_reply(FD_MAGIC + b"\0\0\0\0token expired") == (0, "token expired")
    for bad in [b"", b"KVPFD001\0", b"KVPFD002\0\0\0\0"]:
        with pytest.raises(FDProtocolError):
            decode_reply(bad)


def test_host_refuses_an_unknown_token(kvpilot_host) -> None:
    fd_socket = kvpilot_host.engine_socket.replace("engine.sock", "engine-fd.sock")
    with pytest.raises(FDProtocolError, match="refused the descriptor claim: unknown"):
        claim_fds(fd_socket, b"\1" * 16, 1)
    with pytest.raises(OSError, match="descriptor socket"):
        claim_fds(fd_socket + ".missing", b"\1" * 16, 1)
