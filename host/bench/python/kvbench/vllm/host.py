"""A ``kvpilot serve`` process for the bench: started on a config, stopped
with SIGTERM and started again on the same data directory (the restart arm),
asked for its tier stats.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from kvpilot.control import ControlClient


class ServeProcess:
    """``kvpilot serve`` on its own data directory under root."""

    def __init__(self, binary: str, root: Path, config: dict[str, Any]) -> None:
        self.binary = binary
        self.data_dir = root / "data"
        self.engine_socket = str(self.data_dir / "run" / "engine.sock")
        self.control_socket = str(self.data_dir / "run" / "control.sock")
        self.config_path = root / "kvpilot.yaml"
        # JSON is YAML.
        self.config_path.write_text(json.dumps({**config, "data_dir": str(self.data_dir)}))
        self.log_path = root / "host.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Starts the host and waits until both sockets accept."""
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
        for path in (self.engine_socket, self.control_socket):
            while not _accepts(path):
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"kvpilot serve exited with {self.proc.returncode}: see {self.log_path}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kvpilot serve: {path} not accepting after {timeout}s")
                time.sleep(0.02)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a graceful stop), then SIGKILL after timeout."""
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

    def restart(self) -> None:
        """Stops the host with SIGTERM and starts it on the same data."""
        self.stop()
        self.start()

    def pages(self, tier: str) -> int:
        """Pages the host holds on tier."""
        with ControlClient(self.control_socket) as ctl:
            t = ctl.stats().tiers.get(tier)
            return t.pages if t is not None else 0

    def wait_pages(self, tier: str, at_least: int, timeout: float = 60.0) -> int:
        """Waits until tier holds at_least pages (saves land behind the
        request); returns what it holds.
        """
        deadline = time.monotonic() + timeout
        while (n := self.pages(tier)) < at_least and time.monotonic() < deadline:
            time.sleep(0.05)
        return n

    def settle(self, tier: str, quiet: float = 0.5, timeout: float = 60.0) -> int:
        """Waits until tier's page count stays the same for quiet seconds
        (the saves of earlier requests have landed); returns it.
        """
        deadline = time.monotonic() + timeout
        last, since = self.pages(tier), time.monotonic()
        while time.monotonic() - since < quiet and time.monotonic() < deadline:
            time.sleep(0.05)
            if (n := self.pages(tier)) != last:
                last, since = n, time.monotonic()
        return last


def _accepts(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()
