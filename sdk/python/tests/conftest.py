"""Fixtures that run a real ``kvpilot serve`` for the Python SDK's tests.

``kvpilot_binary`` builds the host once per session (``go build``, CGO off)
or takes ``$KVPILOT_BIN``. ``kvpilot_host`` is a started host on a fresh data
dir with small tiers and page size 16; ``kvpilot_host_factory(**overrides)``
starts one with config keys replaced (nested dicts merge), e.g.
``kvpilot_host_factory(index={"page_size": 4}, model={...})``. Every host is
stopped and its directory removed at the end of the test.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_support import front_door, front_door_factory, refengine_binary  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[3]

#: The config every test host starts from; tests override keys.
BASE_CONFIG: dict[str, Any] = {
    "log": {"level": "info", "format": "text"},
    "http": {"listen": ""},
    "index": {"page_size": 16},
    "tiers": {
        "device": {"capacity_pages": 64},
        "host": {"capacity_pages": 128},
        "disk": {"capacity_pages": 256},
        "remote": {"capacity_pages": 0},
    },
    "nats": {"listen": ""},
    "mover": {"workers": 2, "step_interval": "20ms"},
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class KvpilotHost:
    """A ``kvpilot serve`` subprocess on its own data dir.

    Attributes: ``binary``, ``data_dir``, ``engine_socket``,
    ``control_socket``, ``config_path``, ``log_path`` (the host's stderr,
    appended across restarts), ``config`` (the dict written to the file).
    """

    def __init__(self, binary: str, root: Path, config: dict[str, Any]) -> None:
        self.binary = binary
        self.root = root
        self.data_dir = root / "data"
        run = self.data_dir / "run"
        self.engine_socket = str(run / "engine.sock")
        self.control_socket = str(run / "control.sock")
        self.config = _merge(config, {"data_dir": str(self.data_dir)})
        self.config_path = root / "kvpilot.yaml"
        # JSON is YAML: no YAML library needed.
        self.config_path.write_text(json.dumps(self.config, indent=2))
        self.log_path = root / "host.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        """The last n lines the host logged."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def start(self, timeout: float = 30.0) -> None:
        """Starts the host and waits until both sockets accept."""
        if self.running:
            raise RuntimeError("kvpilot host already running")
        # The host reads KVPILOT_* overrides; keep the caller's out.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KVPILOT_")}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        pending = [self.engine_socket, self.control_socket]
        while pending:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"kvpilot serve exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(
                    f"kvpilot serve: {pending} not accepting after {timeout}s:\n{self.log_tail()}"
                )
            if _accepts(pending[0]):
                pending.pop(0)
            else:
                time.sleep(0.02)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after timeout seconds."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: the host dies without cleaning up (stale sockets stay)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self, timeout: float = 30.0) -> None:
        """Stops the host (SIGTERM) and starts it again on the same data dir."""
        self.stop()
        self.start(timeout)


def _accepts(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


@pytest.fixture(scope="session")
def kvpilot_binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Path of a kvpilot binary: $KVPILOT_BIN, or built once from this tree."""
    given = os.environ.get("KVPILOT_BIN")
    if given:
        if not os.access(given, os.X_OK):
            pytest.fail(f"KVPILOT_BIN={given} is not an executable file")
        return given
    go = shutil.which("go")
    if go is None:
        pytest.skip("no kvpilot host: `go` is not on PATH and KVPILOT_BIN is unset")
    out = tmp_path_factory.mktemp("bin") / "kvpilot"
    env = dict(os.environ, CGO_ENABLED="0")
    res = subprocess.run(
        [go, "build", "-o", str(out), "./host/cmd/kvpilot"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.fail(f"go build ./host/cmd/kvpilot failed:\n{res.stderr}")
    return str(out)


@contextlib.contextmanager
def _hosts(binary: str) -> Iterator[Callable[..., KvpilotHost]]:
    """A host factory; every host it started is stopped and removed at exit."""
    hosts: list[KvpilotHost] = []

    def make(*, start: bool = True, **overrides: Any) -> KvpilotHost:
        # A short root: Unix socket paths are limited to 107 bytes.
        root = Path(tempfile.mkdtemp(prefix="kvp-"))
        h = KvpilotHost(binary, root, _merge(BASE_CONFIG, overrides))
        hosts.append(h)
        if start:
            h.start()
        return h

    try:
        yield make
    finally:
        for h in hosts:
            h.stop()
            shutil.rmtree(h.root, ignore_errors=True)


@pytest.fixture
def kvpilot_host_factory(
    kvpilot_binary: str,
) -> Iterator[Callable[..., KvpilotHost]]:
    """Starts hosts with config overrides: ``factory(index={"page_size": 4})``.

    Pass ``start=False`` to get a host that is configured but not started.
    """
    with _hosts(kvpilot_binary) as make:
        yield make


@pytest.fixture(scope="module")
def kvpilot_module_host_factory(
    kvpilot_binary: str,
) -> Iterator[Callable[..., KvpilotHost]]:
    """``kvpilot_host_factory`` for hosts a whole module shares (behind an
    engine that is slow to start, as vLLM is)."""
    with _hosts(kvpilot_binary) as make:
        yield make


@pytest.fixture
def kvpilot_host(kvpilot_host_factory: Callable[..., KvpilotHost]) -> KvpilotHost:
    """A started host with the base config (page size 16, small tiers)."""
    return kvpilot_host_factory()
