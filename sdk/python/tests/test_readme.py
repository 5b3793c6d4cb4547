"""The SDK's README, run as written: its Python blocks in order, in one
interpreter, from a directory where ``kvpilot-data/run`` is a host's
(started as ``make run`` starts it: 64-token pages, no model configured).
Its shell blocks install the package or run this suite, which a test does
not do; they are named here with why.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"

#: The README's shell commands no test runs, and why.
NOT_RUN_HERE = {
    "pip install": "installs from the network; make py-env builds the suite's own environment",
    ".venv/bin/python -m pytest": "it is the suite this test is part of",
    ".venv/bin/ruff": "make lint runs it",
    ".venv/bin/mypy": "make lint runs it",
}


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(), re.S | re.M)


def test_every_shell_command_is_accounted_for() -> None:
    for block in blocks("sh"):
        for line in block.splitlines():
            cmd = line.split(" #")[0].strip()
            if cmd and not cmd.startswith("#"):
                assert any(cmd.startswith(p) for p in NOT_RUN_HERE), (
                    f"a README command no test runs: {cmd}"
                )


def test_python_examples_run_as_written(
    kvpilot_host_factory: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    host = kvpilot_host_factory(index={"page_size": 64})
    (tmp_path / "kvpilot-data").symlink_to(host.data_dir)
    monkeypatch.chdir(tmp_path)
    code = blocks("python")
    assert len(code) >= 2, "the README's engine and control examples"
    scope: dict[str, Any] = {"__name__": "readme"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(code):
            exec(compile(block, f"{README}:block {i}", "exec"), scope)
    printed = out.getvalue().splitlines()
    # The engine example committed the prompt's four pages; the control
    # example pinned them, and the refused turn said what it refused.
    assert len(scope["hashes"]) == 4
    assert int(printed[0].split()[0]) >= 4, printed
    assert ": none of the turn's 2 directives was applied" in printed[1], printed
    assert printed[2] == "['unknown_session', 'turn_aborted']", printed
    assert os.path.islink(tmp_path / "kvpilot-data")
