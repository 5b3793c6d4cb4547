"""Ports for the servers tests start as processes of their own.

A port the kernel hands out for ("127.0.0.1", 0) lies in its ephemeral
range, which outgoing connections draw from too: between the check and the
server's bind (vLLM takes a minute to start) another connection can take
it. These come from below that range (Linux's starts at 32768), as the Go
tests' do (host/freeport).
"""

from __future__ import annotations

import random
import socket

_LOW, _HIGH = 20000, 32768


def free_port() -> int:
    """A loopback TCP port nothing listens on now, below the ephemeral range."""
    for _ in range(1000):
        port = random.randrange(_LOW, _HIGH)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_LOW}..{_HIGH - 1}")
