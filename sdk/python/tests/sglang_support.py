"""Running SGLang workers (tests/sglang_worker.py) against a test's kvpilot host.

Each call starts one worker process with the SGLang venv's Python (this
interpreter when it has SGLang, else ``$KVPILOT_SGLANG_PYTHON`` or the
repository's ``.venv-sglang``), so a producer and a consumer never share a
process, and returns what it printed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
SDK = TESTS.parent
REPO = SDK.parents[1]

# One SGLang worker process imports SGLang (about 20 s here) and runs its
# stages; this bounds a stuck one.
WORKER_TIMEOUT_S = 600


def sglang_python() -> str | None:
    """An interpreter with SGLang installed, or None."""
    if importlib.util.find_spec("sglang") is not None:
        return sys.executable
    given = os.environ.get("KVPILOT_SGLANG_PYTHON")
    if given:
        return given
    venv = REPO / ".venv-sglang" / "bin" / "python"
    return str(venv) if venv.exists() else None


def run_worker(run: dict[str, Any], *, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Runs one worker process over ``run["stages"]``; one result per stage."""
    py = sglang_python()
    assert py is not None, "no Python with SGLang: make test-sglang builds .venv-sglang"
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = os.pathsep.join([str(SDK), str(TESTS), e.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [py, "-W", "ignore", str(TESTS / "sglang_worker.py"), json.dumps(run)],
        capture_output=True,
        text=True,
        timeout=WORKER_TIMEOUT_S,
        env=e,
        cwd=TESTS,
    )
    if proc.returncode != 0:
        raise AssertionError(f"SGLang worker exited with {proc.returncode}:\n{proc.stderr[-6000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]
    assert lines, f"SGLang worker printed no result:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1])


def seq(name: str, start: int, pages: int, page_size: int, **ns: Any) -> dict[str, Any]:
    """A named sequence of whole pages: tokens start, start+1, ..."""
    return {"name": name, "tokens": list(range(start, start + pages * page_size)), **ns}
