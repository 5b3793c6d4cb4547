"""Runs vLLM on token-id prompts in a subprocess (run_llm.py), as the
connector tests and the Dynamo test start it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SDK_PYTHON = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).resolve().parent / "run_llm.py"

#: vLLM's CPU attention takes blocks in multiples of 32 tokens, and the
#: connector needs vLLM's block to be kvpilot's page.
PAGE = 32
MAX_TOKENS = 8


def run_vllm(
    workdir: Path,
    model: Path,
    connector: dict[str, Any] | None,
    prompts: list[dict[str, Any]],
    *,
    multiprocess: bool = False,
    expect_error: bool = False,
    **spec_extra: Any,
) -> dict[str, Any]:
    """Runs vLLM on the prompts in a subprocess; returns run_llm's result
    (``log`` is vLLM's output). ``multiprocess`` runs vLLM's scheduler and
    worker in processes of their own, as it serves in production;
    spec_extra adds run_llm.py's optional spec keys.
    """
    out = workdir / "result.json"
    spec = {
        "model": str(model),
        "block_size": PAGE,
        "max_tokens": MAX_TOKENS,
        "connector": connector,
        "prompts": prompts,
        "out": str(out),
        **spec_extra,
    }
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SDK_PYTHON), env.get("PYTHONPATH")]))
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocess else "0"
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    tp = int(spec_extra.get("tensor_parallel_size") or 1)
    if tp > 1:
        # vLLM's CPU workers each bind their OpenMP threads to cores of
        # their own; on one NUMA node it must be told which.
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(r) for r in range(tp)))
    log_path = workdir / "vllm.log"
    with open(log_path, "wb") as log:
        proc = subprocess.run(
            [sys.executable, str(RUNNER), str(spec_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,
            timeout=600,
        )
    text = log_path.read_text(errors="replace")
    assert out.exists(), f"vLLM runner wrote no result (exit {proc.returncode}):\n{text[-6000:]}"
    res = json.loads(out.read_text())
    res["log"] = text
    if not expect_error:
        assert "error" not in res, f"{res['error']}\n{res.get('traceback', '')}\n{text[-6000:]}"
    return res


def restart_host_config(page: int = PAGE) -> dict[str, Any]:
    """Host config overrides for check_hits_then_restart: a staging tier of
    a few prompts, and host and disk tiers that hold every prompt (the disk
    tier outlives the restart).
    """
    return {
        "index": {"page_size": page},
        "tiers": {
            "device": {"capacity_pages": 16},
            "host": {"capacity_pages": 128},
            "disk": {"capacity_pages": 256},
        },
    }


def kvpilot_report(output: dict[str, Any]) -> dict[str, Any]:
    """What the connector reported for a request (its output's
    ``kv_transfer_params["kvpilot"]``).
    """
    return (output.get("kv_transfer_params") or {}).get("kvpilot") or {}


def check_hits_then_restart(
    run: Any, host: Any, connector: dict[str, Any], prompts: list[Any], answers: list[Any], hit: int
) -> None:
    """A fresh vLLM, served prompts[0] and prompts[1] from kvpilot and
    computing prompts[2], answers what vLLM alone answered (``answers``,
    token ids per prompt); after a host restart prompts[2] comes back from
    kvpilot's disk tier, answering the same. ``run(name, connector,
    prompts)`` runs vLLM in a directory of its own.
    """
    fresh = run("fresh", connector, prompts)
    for i, (out, want) in enumerate(zip(fresh["outputs"], answers, strict=True)):
        assert kvpilot_report(out)["cached_tokens"] == (hit if i < 2 else 0), (i, out)
        assert out["num_cached_tokens"] == (hit if i < 2 else 0), (i, out)
        assert out["token_ids"] == want, (i, out["token_ids"], want)
    host.restart()
    again = run("restarted", connector, prompts[2:])
    (out,) = again["outputs"]
    assert kvpilot_report(out)["cached_tokens"] == hit, out
    assert out["token_ids"] == answers[2]
