"""One vLLM process of the bench, kept running across rounds.

The parent starts ``python -m kvbench.vllm.engine SPEC_JSON`` and talks
to it in JSON lines: one prompt (token ids) in, its wall-clock time, cached
tokens, first token and ``kv_transfer_params`` out. vLLM's own output goes
to a log file, so the protocol has stdout to itself. Each prompt is one
``LLM.generate`` of one token: a request's time to first token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any


class EngineProcess:
    """The parent's handle on one engine process."""

    def __init__(self, name: str, spec: dict[str, Any], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        tp = int(spec.get("tensor_parallel_size") or 1)
        if tp > 1:
            # vLLM's CPU workers bind their threads to cores of their own;
            # on one NUMA node it must be told which.
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(map(str, range(tp))))
        self._log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvbench.vllm.engine", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
        )
        ready = self._read()
        if not ready.get("ready"):
            raise RuntimeError(
                f"engine {name} did not start: {ready.get('error')} (see {log_path})"
            )

    def ask(self, tokens: list[int]) -> dict[str, Any]:
        """Runs one prompt; returns ms, cached_tokens, token and kvpilot."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"tokens": tokens}) + "\n")
        self.proc.stdin.flush()
        out = self._read()
        if "error" in out:
            raise RuntimeError(f"engine {self.name}: {out['error']} (see {self.log_path})")
        return out

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(
                f"engine {self.name} exited ({self.proc.wait()}): see {self.log_path}"
            )
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def _serve(spec: dict[str, Any], proto: IO[str]) -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kwargs: dict[str, Any] = {}
    if int(spec.get("tensor_parallel_size") or 1) > 1:
        kwargs["tensor_parallel_size"] = spec["tensor_parallel_size"]
        kwargs["distributed_executor_backend"] = "mp"
    if spec.get("connector") is not None:
        kwargs["kv_transfer_config"] = {
            "kv_connector": "KvpilotConnector",
            "kv_connector_module_path": "kvpilot.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": spec["connector"],
        }
    llm = LLM(
        model=spec["model"],
        skip_tokenizer_init=True,
        enforce_eager=True,
        block_size=spec["block_size"],
        dtype="bfloat16",
        max_model_len=spec["max_model_len"],
        max_num_batched_tokens=spec["max_model_len"],
        max_num_seqs=2,
        seed=0,
        kv_cache_memory_bytes=spec["kv_cache_memory_bytes"],
        kv_cache_dtype=spec.get("kv_cache_dtype", "auto"),
        **kwargs,
    )
    sp = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
    proto.write(json.dumps({"ready": True}) + "\n")
    proto.flush()
    for line in sys.stdin:
        req = json.loads(line)
        t0 = time.perf_counter()
        (o,) = llm.generate([TokensPrompt(prompt_token_ids=req["tokens"])], sp, use_tqdm=False)
        ms = (time.perf_counter() - t0) * 1000
        c = o.outputs[0]
        proto.write(
            json.dumps(
                {
                    "ms": ms,
                    "cached_tokens": o.num_cached_tokens,
                    "token": c.token_ids[0] if c.token_ids else None,
                    "kvpilot": (o.kv_transfer_params or {}).get("kvpilot"),
                }
            )
            + "\n"
        )
        proto.flush()


def main() -> int:
    # The protocol keeps the real stdout; vLLM's prints go to stderr (the log).
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        _serve(json.loads(sys.argv[1]), proto)
    except BaseException as e:
        proto.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        proto.flush()
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
