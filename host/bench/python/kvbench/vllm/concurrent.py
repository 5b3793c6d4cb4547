"""Saves under concurrent chats: ``python -m kvbench.vllm.concurrent``.

Sessions of streamed chats at once through vLLM's OpenAI server (its CPU
build, SmolLM2-135M-Instruct, the kvpilot connector), each turn the whole
history and a new user message, with vLLM's KV cache smaller than the
sessions' working set, so requests wait for blocks, are preempted and are
prefilled in chunks. Then a fresh vLLM on the same host is sent the same
requests again (the recorded answers, not new ones).

Reported per session count: the pages the connector did not save, from
vLLM's log (each reason's first loss, then the summaries) and from the
host's ``/metrics`` (Commit and Allocate calls it refused, by code); the
prompt tokens vLLM reported cached in each run; and the cached share of the
identical second run, which a lost save lowers.

    python -m kvbench.vllm.concurrent --kvpilot bin/kvpilot [--sessions 8,16]
        [--turns 6] [--workdir DIR]

One JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from kvbench.vllm.host import ServeProcess

log = logging.getLogger("kvbench.vllm.concurrent")

PAGE = 32
MODEL = "smollm2"
#: As the load was first seen: 128 MiB of vLLM KV (about 5,800 tokens of
#: SmolLM2, a few sessions' histories), a 512-page staging tier and a
#: 2,048-page host tier.
KV_BYTES = 128 << 20
HOST_CONFIG: dict[str, Any] = {
    "index": {"page_size": PAGE},
    "tiers": {
        "device": {"capacity_pages": 512},
        "host": {"capacity_pages": 2048},
        "disk": {"capacity_pages": 0},
    },
}
#: The user messages' words (seeded: every run sends the same text).
VOCABULARY = (
    "cache page token agent tool call result file patch test build error trace session "
    "prefix block layer head rotate splice prune warm pin lease worker host engine queue"
)
#: A session's system prompt and each user message, in words (about a token
#: each): six turns reach about 3,000 tokens, so with several sessions
#: prefilling at once vLLM's 2,048-token step budget splits prompts into
#: chunks, saved in several commits.
SYSTEM_WORDS = 600
USER_WORDS = 300
#: Lines of vLLM's log that say a save was skipped, failed or refused.
LOSS = re.compile(r"invalid_slot|given twice|pages not saved|skipped saving|saving .*failed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _user_text(r: random.Random, words: int) -> str:
    vocabulary = VOCABULARY.split()
    return " ".join(r.choice(vocabulary) for _ in range(words))


class Vllm:
    """vLLM's OpenAI server with the connector, on a port of its own."""

    def __init__(self, socket_path: str, seqs: int, log_path: Path) -> None:
        from kvpilot.smollm2 import model_dir

        self.port = _free_port()
        self.log_path = log_path
        ktc = json.dumps(
            {
                "kv_connector": "KvpilotConnector",
                "kv_connector_module_path": "kvpilot.vllm",
                "kv_role": "kv_both",
                "kv_connector_extra_config": {"socket": socket_path},
            }
        )
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
        with open(log_path, "ab") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                 "--model", str(model_dir()), "--served-model-name", MODEL,
                 "--host", "127.0.0.1", "--port", str(self.port),
                 "--block-size", str(PAGE), "--enforce-eager", "--max-model-len", "4096",
                 "--max-num-seqs", str(seqs), "--kv-cache-memory-bytes", str(KV_BYTES),
                 "--enable-prompt-tokens-details", "--seed", "0", "--kv-transfer-config", ktc],
                stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 600
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"vLLM did not start: see {log_path}")
            time.sleep(1)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models", timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _chat(client: Any, messages: list[dict[str, str]]) -> tuple[str, int, int]:
    """One streamed request: its answer, prompt tokens and cached tokens."""
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=32,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, prompt, cached = [], 0, 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            prompt = chunk.usage.prompt_tokens
            details = chunk.usage.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details is not None else 0
    return "".join(text), prompt, cached


def _sessions(
    port: int, scripts: list[list[list[dict[str, str]]]] | None, n: int, turns: int
) -> Any:
    """Runs n sessions at once; with scripts, replays their recorded
    requests. Returns each session's requests and (prompt, cached) tokens.
    """
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=600)
    requests: list[list[list[dict[str, str]]]] = [[] for _ in range(n)]
    usage: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    errors: list[str] = []

    def session(i: int) -> None:
        r = random.Random(i)
        history = [{"role": "system", "content": _user_text(r, SYSTEM_WORDS)}]
        try:
            for t in range(turns):
                if scripts is not None:
                    messages = scripts[i][t]
                else:
                    history.append({"role": "user", "content": _user_text(r, USER_WORDS)})
                    messages = list(history)
                answer, prompt, cached = _chat(client, messages)
                requests[i].append(messages)
                usage[i].append((prompt, cached))
                history.append({"role": "assistant", "content": answer})
                time.sleep(r.uniform(0.05, 0.3))  # the agent's tool time
        except Exception as e:  # a failed request is reported, not raised
            errors.append(f"session {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=session, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return requests, usage, errors


def _refused_calls(metrics_port: int) -> dict[str, float]:
    """The host's refused Allocate and Commit calls, by call and code."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    pat = r'kvpilot_engine_requests_total\{call="(Allocate|Commit)",outcome="([a-z_]+)"\} (\S+)'
    for call, outcome, n in re.findall(pat, text):
        if outcome != "ok":
            out[f"{call}.{outcome}"] = float(n)
    return out


def measure(binary: str, sessions: int, turns: int, root: Path) -> dict[str, Any]:
    """One host, a vLLM that serves the sessions, a fresh one that replays them."""
    root.mkdir(parents=True, exist_ok=True)
    metrics_port = _free_port()
    host = ServeProcess(
        binary, root, {**HOST_CONFIG, "http": {"listen": f"127.0.0.1:{metrics_port}"}}
    )
    host.start()
    try:
        out: dict[str, Any] = {"sessions": sessions, "turns": turns}
        scripts = None
        for run in ("first", "replay"):
            vlog = root / f"vllm-{run}.log"
            v = Vllm(host.engine_socket, sessions, vlog)
            try:
                t0 = time.monotonic()
                requests, usage, errors = _sessions(v.port, scripts, sessions, turns)
                wall = time.monotonic() - t0
                host.settle("host")
            finally:
                v.stop()
            lost = [ln for ln in vlog.read_text(errors="replace").splitlines() if LOSS.search(ln)]
            prompt = sum(p for s in usage for p, _ in s)
            cached = sum(c for s in usage for _, c in s)
            out[run] = {
                "wall_s": round(wall, 1),
                "failed_requests": errors,
                "loss_log_lines": lost[:20],
                "loss_log_count": len(lost),
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "cached_share": round(cached / prompt, 4) if prompt else 0.0,
            }
            log.info("sessions %d, %s run: %s", sessions, run, out[run])
            scripts = requests
        out["host_refused_calls"] = _refused_calls(metrics_port)
        return out
    finally:
        host.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvbench.vllm.concurrent")
    ap.add_argument("--kvpilot", required=True, help="the kvpilot binary the host runs")
    ap.add_argument("--sessions", default="8,16", help="comma-separated session counts")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--workdir", default="", help="keep the hosts' data and vLLM logs here")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="kvbench-concurrent-"))
    report = {
        "runs": [
            measure(a.kvpilot, int(n), a.turns, root / f"sessions-{n}")
            for n in a.sessions.split(",")
            if n
        ]
    }
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
