"""Running SGLang workers (tests/sglang_worker.py) against a test's kvpilot host.

Each call starts one worker process with a Python that has SGLang (this
interpreter when it has it, else ``$KVPILOT_SGLANG_PYTHON`` or the
repository's ``.venv-sglang``), so a producer and a consumer never share a
process, and returns what it printed. ``run_ranks`` starts one process per
tensor-parallel rank of one engine instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
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


def _command(run: dict[str, Any], env: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
    py = sglang_python()
    assert py is not None, "no Python with SGLang: make py-env installs it in .venv"
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = os.pathsep.join([str(SDK), str(TESTS), e.get("PYTHONPATH", "")])
    return [py, "-W", "ignore", str(TESTS / "sglang_worker.py"), json.dumps(run)], e


def _result(returncode: int, stdout: str, stderr: str, who: str) -> list[dict[str, Any]]:
    if returncode != 0:
        raise AssertionError(f"{who} exited with {returncode}:\n{stderr[-6000:]}")
    lines = [ln for ln in stdout.splitlines() if ln.startswith("[")]
    assert lines, f"{who} printed no result:\n{stdout[-2000:]}\n{stderr[-4000:]}"
    return json.loads(lines[-1])


def run_worker(run: dict[str, Any], *, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Runs one worker process over ``run["stages"]``; one result per stage."""
    cmd, e = _command(run, env)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, env=e, cwd=TESTS
    )
    return _result(proc.returncode, proc.stdout, proc.stderr, "SGLang worker")


def run_ranks(run: dict[str, Any], tp_size: int) -> list[list[dict[str, Any]]]:
    """Runs one worker process per tensor-parallel rank over the same
    ``run["stages"]``, as one SGLang engine's ranks (a gloo group of the
    processes, on CPU); per rank, one result per stage.
    """
    with tempfile.TemporaryDirectory(prefix="kvp-ranks-") as tmp:
        procs = []
        for rank in range(tp_size):
            cmd, e = _command(
                {**run, "tp_rank": rank, "tp_size": tp_size, "store": f"{tmp}/store"}, None
            )
            # Files, not pipes: a rank's log cannot fill a pipe and stall it.
            with open(f"{tmp}/out{rank}", "w") as out, open(f"{tmp}/err{rank}", "w") as err:
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=err, env=e, cwd=TESTS))
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        try:
            while any(p.poll() is None for p in procs):
                # A rank that failed leaves the others waiting in a collective.
                if time.monotonic() > deadline or any(p.poll() for p in procs):
                    break
                time.sleep(0.1)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
        results = []
        for rank, p in enumerate(procs):
            out = Path(f"{tmp}/out{rank}").read_text()
            err = Path(f"{tmp}/err{rank}").read_text()
            results.append((p.returncode, out, err))
    return [_result(*r, f"SGLang rank tp{rank}") for rank, r in enumerate(results)]


def seq(name: str, start: int, pages: int, page_size: int, **ns: Any) -> dict[str, Any]:
    """A named sequence of whole pages: tokens start, start+1, ..."""
    return {"name": name, "tokens": list(range(start, start + pages * page_size)), **ns}
