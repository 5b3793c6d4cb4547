"""Diagnosing a host's Unix socket for error messages people act on."""

from __future__ import annotations

import os
import socket


def socket_problem(path: str, timeout: float = 1.0) -> str | None:
    """Why nothing accepts connections on the Unix socket at path, or None.

    Used to turn a failed call into an error that says what is wrong with
    the socket ("no such socket", "it refuses connections (...)").
    """
    if not os.path.exists(path):
        return "no such socket"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(path)
    except OSError as e:
        return f"it refuses connections ({e.strerror or e})"
    finally:
        s.close()
    return None
