"""``python -m kvbench.splicequality`` end to end, on two small cases.

SmolLM2 on two real edits of the repository's traces (a truncated tool
output and a clear of two tool results), contexts of at most 1024 tokens,
the request's new messages prefilled after the splice as through the front
door: one JSON object with every arm and its figures, the control exactly
0 (the host's re-prefill of the tail equals the reference bit for bit),
the layer-0 re-rotation check, and the host's guard landing where its path
in torch says. No target is asserted: they are the benchmark's business.
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

ARMS = {
    "control", "reprefill", "splice", "splice_gap", "recompute_first_16", "recompute_first_64",
    "recompute_first_256", "recompute_deviation_5", "recompute_deviation_15",
    "recompute_deviation_30", "guard", "no_edit",
}  # fmt: skip
FIELDS = {"kl_mean", "kl_max", "top1", "first_top1", "ppl_ratio", "recomputed_share"}
CASES = [
    "spotter_258c7280-ae70-4798-800f-63464d01a85d#0@74:truncate",
    "spotter_agent-a2898e3#0@14:clear",
]


def test_bench_two_cases(kvpilot_host_factory) -> None:  # type: ignore[no-untyped-def]
    h = kvpilot_host_factory(
        index={"page_size": 16, "write_policy": "none", "sink_tokens": 0},
        tiers={"device": {"capacity_pages": 512}, "host": {"capacity_pages": 0}},
        # The arms say what they recompute: the host's defaults would run the
        # guard on the plain splice too.
        splice={"max_kl": 0, "recompute": {"first": 0}},
    )
    repo = Path(__file__).resolve().parents[3]
    path = [str(repo / "sdk" / "python"), str(repo / "host" / "bench" / "python")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, "-m", "kvbench.splicequality", "--engine-socket", h.engine_socket,
            "--control-socket", h.control_socket, "--context-tokens", "1024"]  # fmt: skip
    for c in CASES:
        args += ["--case", c]
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, res.stdout
    r = json.loads(lines[0])
    assert r["scenario"] == "splice-quality"
    assert r["params"]["model"] == "SmolLM2-135M-Instruct" and r["params"]["cases"] == 2
    assert set(r["arms"]) == ARMS
    for name, arm in r["arms"].items():
        assert set(arm) >= FIELDS, name
    assert [c["name"] for c in r["cases"]] == CASES
    # The request's new messages are prefilled after the splice, as through
    # the front door; the shares are of the cached text from the edit on.
    assert r["params"]["fresh"] == "last"
    assert all(c["fresh_tokens"] > 0 for c in r["cases"])
    assert r["params"]["fresh_tokens"] == sum(c["fresh_tokens"] for c in r["cases"])
    ctl = r["arms"]["control"]
    assert ctl["kl_mean"] == 0.0 and ctl["kl_max"] == 0.0 and ctl["recomputed_share"] == 1.0
    chk = r["checks"]
    assert chk["control_max_abs_logit_diff"] == 0.0
    assert chk["rotation_cases"] == 1 and chk["rotation_failures"] == []
    assert chk["host_guard_matches_trajectory"] is True, res.stderr[-4000:]
    assert r["targets"]["control_exactly_zero"] is True and r["targets"]["rotation_check"] is True
    assert {"first", "first_best", "deviation", "guard", "splice"} <= set(r["curves"])
    assert isinstance(r["targets"]["met"], bool)
