"""Helpers for the Dynamo interop tests: a minimal NATS subscriber and
requester (the plain-text NATS client protocol over a socket, so the tests
need no NATS library), MessagePack decoding of Dynamo's event-plane envelope,
and a worker's cache_control endpoint served in a real Dynamo runtime.

The envelope (ai-dynamo 1.6.1, read from a real KvEventPublisher's messages)
is a MessagePack map {publisher_id, sequence, published_at, topic, payload};
for KV events the payload is a MessagePack array of RouterEvents.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any


def msgpack_decoder() -> Any:
    """A MessagePack decode function (msgspec, which ai-dynamo depends on,
    or msgpack), or None."""
    try:
        import msgspec

        return msgspec.msgpack.decode
    except ImportError:
        pass
    try:
        import msgpack

        return lambda b: msgpack.unpackb(b, raw=False)
    except ImportError:
        return None


class NatsSubscriber:
    """Subscribes to one subject on a NATS server and collects messages."""

    def __init__(self, port: int, subject: str, timeout: float = 10.0) -> None:
        self.subject = subject
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        info = self._line()
        if not info.startswith(b"INFO "):
            raise RuntimeError(f"not a NATS server: {info!r}")
        self.sock.sendall(
            b'CONNECT {"verbose":false,"pedantic":false,"protocol":1}\r\n'
            + f"SUB {subject} 1\r\n".encode()
            + b"PING\r\n"
        )
        while True:
            line = self._line()
            if line == b"PONG":
                break
            if line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("NATS server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("NATS server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def next(self, deadline: float) -> tuple[str, bytes] | None:
        """The next message (subject, payload), or None at the deadline."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                line = self._line()
            except TimeoutError:
                return None
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if line.startswith(b"MSG "):
                parts = line.split()
                return parts[1].decode(), self._exact(int(parts[-1]))

    def request(self, subject: str, payload: bytes, deadline: float) -> bytes | None:
        """Publishes ``payload`` on ``subject`` with this subscription's
        subject as the reply subject, and returns the reply (None at the
        deadline).
        """
        self.sock.sendall(
            f"PUB {subject} {self.subject} {len(payload)}\r\n".encode() + payload + b"\r\n"
        )
        msg = self.next(deadline)
        return None if msg is None else msg[1]

    def close(self) -> None:
        self.sock.close()


def router_events(data: bytes, decode: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Decodes one envelope: (the envelope without its payload, its events)."""
    env = decode(data)
    payload = env.pop("payload")
    return env, decode(bytes(payload))


Ask = Callable[[Any], Awaitable[dict[str, Any]]]


@contextlib.asynccontextmanager
async def cache_control_endpoint(
    control_socket: str, path: str, kv_block_size: int, file_kv: str
) -> AsyncIterator[Ask]:
    """Serves kvpilot.dynamo's cache_control handler for the host at
    ``control_socket`` on the Dynamo endpoint ``path`` of one runtime (the
    worker's) and yields ``ask(request) -> reply``, which sends a request
    from another runtime (the router's) to that worker with
    ``client.direct``. Discovery is Dynamo's file backend at ``file_kv``.
    """
    from dynamo import _core as dynamo_core

    import kvpilot.dynamo

    os.environ["DYN_FILE_KV"] = file_kv
    loop = asyncio.get_running_loop()
    worker = dynamo_core.DistributedRuntime(loop, "file", "tcp", event_plane="zmq")
    caller = dynamo_core.DistributedRuntime(loop, "file", "tcp", event_plane="zmq")
    try:
        ep = worker.endpoint(path)
        handler = kvpilot.dynamo.cache_control_handler(
            control_socket, kv_block_size=kv_block_size, worker_id=ep.connection_id()
        )
        serving = asyncio.ensure_future(ep.serve_endpoint(handler))
        client = await caller.endpoint(path).client()
        ids = await asyncio.wait_for(client.wait_for_instances(), 10)
        assert ep.connection_id() in ids

        async def ask(req: Any) -> dict[str, Any]:
            replies = [r async for r in await client.direct(req, ep.connection_id())]
            assert len(replies) == 1, replies
            r = replies[0]
            return r.data() if hasattr(r, "data") else r

        yield ask
        serving.cancel()
    finally:
        worker.shutdown()
        caller.shutdown()
        os.environ.pop("DYN_FILE_KV", None)
