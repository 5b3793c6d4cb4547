"""A front door to drive with the official SDKs (fixtures conftest.py
re-exports): a ``kvpilot serve`` with
``gateway.listen`` on, and the reference engine's OpenAI-compatible HTTP
server (``refengine --listen``) as its upstream, registered with the same
host.

``refengine_binary`` builds ``./examples/refengine/cmd/refengine`` once per
session (CGO off) or takes ``$KVPILOT_REFENGINE_BIN``. ``front_door``
starts both and stops the engine at the end of the test (the host factory
stops the host).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[3]

#: The model name the reference engine serves.
MODEL = "ref-gqa"


def wait_accepting(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing accepts on 127.0.0.1:{port} after {timeout}s")


@dataclass
class Engine:
    """A running ``refengine --listen``."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class FrontDoor:
    """A host with its front door, and the engine behind it."""

    host: Any
    engine: Engine
    port: int

    @property
    def openai_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def refengine_binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Path of the reference engine: $KVPILOT_REFENGINE_BIN or built once."""
    given = os.environ.get("KVPILOT_REFENGINE_BIN")
    if given:
        return given
    go = shutil.which("go")
    if go is None:
        pytest.skip("no reference engine: `go` is not on PATH and KVPILOT_REFENGINE_BIN is unset")
    out = tmp_path_factory.mktemp("refengine") / "refengine"
    res = subprocess.run(
        [go, "build", "-o", str(out), "./examples/refengine/cmd/refengine"],
        cwd=REPO_ROOT,
        env=dict(os.environ, CGO_ENABLED="0"),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.fail(f"go build ./examples/refengine/cmd/refengine failed:\n{res.stderr}")
    return str(out)


def start_engine(binary: str, host: Any, port: int) -> Engine:
    log = host.root / "refengine.log"
    with open(log, "ab") as f:
        proc = subprocess.Popen(
            [
                binary,
                "--socket",
                host.engine_socket,
                "--page-size",
                "16",
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=f,
            start_new_session=True,
        )
    eng = Engine(proc, port, log)
    try:
        wait_accepting(port)
    except RuntimeError:
        eng.stop()
        raise RuntimeError(f"refengine did not start:\n{log.read_text(errors='replace')}") from None
    return eng


@pytest.fixture
def front_door_factory(
    kvpilot_host_factory: Callable[..., Any], refengine_binary: str
) -> Iterator[Callable[..., FrontDoor]]:
    """Starts a front door: ``factory(**config_overrides)``."""
    engines: list[Engine] = []

    def make(**overrides: Any) -> FrontDoor:
        up, gw = free_port(), free_port()
        cfg: dict[str, Any] = {
            "index": {"page_size": 16, "auto_splice": True},
            "engine": {"tokenizer": "chunk4"},
            "gateway": {
                "listen": f"127.0.0.1:{gw}",
                "upstream": f"http://127.0.0.1:{up}/v1",
                "timeout": "5s",
            },
        }
        for k, v in overrides.items():
            cfg[k] = {**cfg.get(k, {}), **v} if isinstance(v, dict) else v
        host = kvpilot_host_factory(**cfg)
        wait_accepting(gw)
        eng = start_engine(refengine_binary, host, up)
        engines.append(eng)
        return FrontDoor(host, eng, gw)

    yield make
    for e in engines:
        e.stop()


@pytest.fixture
def front_door(front_door_factory: Callable[..., FrontDoor]) -> FrontDoor:
    """A front door with the default config (no policies)."""
    return front_door_factory()


def tool_output(i: int) -> str:
    """A long, distinct tool result."""
    return f"line {i} of a directory listing: drwxr-xr-x root some-directory\n" * 12
