"""The kvpilot_host fixture itself: start, restart, kill, overrides."""

from __future__ import annotations

import json
import os


def test_host_lifecycle(kvpilot_host_factory) -> None:
    h = kvpilot_host_factory(index={"page_size": 4})
    assert h.config["index"]["page_size"] == 4
    assert h.config["tiers"]["device"]["capacity_pages"] == 64
    assert json.loads(h.config_path.read_text())["data_dir"] == str(h.data_dir)
    assert os.path.exists(h.engine_socket) and os.path.exists(h.control_socket)
    first = h.proc.pid
    h.restart()
    assert h.running and h.proc.pid != first
    h.kill()
    assert not h.running
    h.start()
    assert h.running
    h.stop()
    assert not h.running
