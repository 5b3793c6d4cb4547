"""``python -m kvbench.realmodel`` end to end, small.

Its default model, SmolLM2-135M-Instruct with its own tokenizer and chat
template, on a short prompt from a synthetic trace file: one JSON object on
stdout with the four arms, and the checks that do not depend on timing.
Times are a benchmark's business, never a test's, so the TTFT target is not
asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "torch", reason="torch is not installed here: pip install 'kvpilot[torch]', or make py-env"
)
pytest.importorskip(
    "transformers",
    reason="transformers is not installed here: pip install 'kvpilot[torch]', or make py-env",
)

from kvbench.scenario import host_config
from kvpilot.smollm2 import MODEL_NAME
from kvpilot.torchengine.logits import REL_TOL

#: The prompt's length: enough for a tool output to truncate after the
#: first pages, small enough for two cores.
TOKENS = 1200


def synthetic_trace(path: Path) -> None:
    """One session in the traces' JSON Lines format, tool outputs included."""
    msgs = [{"role": "user", "content": "Fix the failing date parser test in this repository."}]
    for k in range(8):
        msgs.append({"role": "assistant", "content": f"Running step {k}.", "tool_name": "Bash"})
        lines = "\n".join(
            f"line {k}.{n}: value={n * n} status=ok path=src/m{k}.py" for n in range(14)
        )
        msgs.append({"role": "tool", "content": lines, "tool_name": "Bash"})
    path.write_text(
        json.dumps({"session_id": "synthetic", "source": "test", "messages": msgs}) + "\n"
    )


def test_bench_reports_four_arms(kvpilot_host_factory, tmp_path: Path) -> None:
    h = kvpilot_host_factory(**host_config(16, 512, sink_tokens=0))
    synthetic_trace(tmp_path / "t.jsonl")
    repo = Path(__file__).resolve().parents[3]
    path = [str(repo / "sdk" / "python"), str(repo / "host" / "bench" / "python")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]))
    args = [
        sys.executable, "-m", "kvbench.realmodel",
        "--engine-socket", h.engine_socket, "--control-socket", h.control_socket,
        "--traces", str(tmp_path), "--trace", "t.jsonl",
        "--tokens", str(TOKENS), "--repeat", "1", "--page-size", "16",
    ]  # fmt: skip
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, res.stdout
    r = json.loads(lines[0])
    assert r["scenario"] == "real-model"
    assert r["params"]["model"] == MODEL_NAME
    arms = r["arms"]
    assert set(arms) >= {"full_prefill", "kvpilot_prefix", "reprefill_edit", "kvpilot_splice"}
    n = arms["full_prefill"]["prompt_tokens"]
    assert TOKENS - 16 <= n <= TOKENS
    # The previous turn is cached, in whole pages: the closing user turn
    # and the generation prompt (about 30 tokens) and a partial page are not.
    assert arms["kvpilot_prefix"]["cached_tokens"] >= n - 2 * 16 - 30
    checks = r["checks"]
    assert checks["prefix_logit_rel_diff"] <= REL_TOL and checks["prefix_top1_equal"] is True
    assert checks["splice_layer0_keys_ok"] is True, res.stderr[-4000:]
    assert isinstance(checks["splice_vs_reprefill"]["top1_equal"], bool)
    splice, re = arms["kvpilot_splice"]["prefill_tokens"], arms["reprefill_edit"]["prefill_tokens"]
    assert 0 < splice <= 0.2 * re
    assert isinstance(r["targets"]["met"], bool)


#: Makes ``import torch`` fail as it does where PyTorch is not installed.
NO_TORCH = """
import importlib.abc
import sys


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
"""


def test_bench_real_model_without_torch(kvpilot_binary: str, tmp_path: Path) -> None:
    """``kvpilot bench real-model`` with a Python that has kvpilot but not
    PyTorch names what is missing (the child's last error line) and the
    command that installs the repository's pinned lock, instead of a guess."""
    repo = Path(__file__).resolve().parents[3]
    bench = Path(kvpilot_binary).with_name("kvpilot-bench")
    if not bench.exists():  # a kvpilot built by the fixture has none beside it
        res = subprocess.run(
            ["go", "build", "-o", str(bench), "./host/cmd/kvpilot-bench"],
            cwd=repo,
            env=dict(os.environ, CGO_ENABLED="0"),
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, res.stderr
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(repo / "sdk" / "python")]))
    res = subprocess.run(
        [kvpilot_binary, "bench", "real-model", "--python", sys.executable],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stderr
    assert "ModuleNotFoundError: No module named 'torch'" in res.stderr, res.stderr
    install = (
        f"hint: install what the benchmark's Python side needs: {sys.executable} -m pip install "
        f"--no-deps -r {repo / 'sdk' / 'python' / 'requirements.txt'}"
    )
    assert install in res.stderr, res.stderr
