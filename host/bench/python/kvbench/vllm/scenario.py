"""The arms of ``kvpilot bench vllm``, measured in one run, interleaved.

Per model, one kvpilot host and three vLLM processes (kvbench.vllm.engine):
``plain`` without the connector, ``filler`` and ``fresh`` with it. Each
round takes a new random prompt P of about ``tokens`` tokens and, in order
(the two misses take turns going first):

- ``no_connector_miss``: plain computes P (vLLM alone, nothing cached);
- ``connector_miss``: filler computes P, saving its pages to kvpilot behind
  the request; the round then waits for them to reach kvpilot's host tier
  (not timed);
- ``connector_hit_fresh_process``: fresh, which never saw P, is served P's
  prefix from kvpilot;
- ``vllm_prefix_hit``: plain computes P again, from its own prefix cache;
- ``connector_hit_after_restart``: filler computes a second prompt R, the
  host is stopped with SIGTERM and started again on the same data, and
  fresh asks for R: what survived the restart is served (the disk tier;
  the staging and host tiers are memory), and the request never fails.

Ratios are taken per round (the arms of a round run seconds apart, so
another process's load shifts them alike) and their median reported, with
the min and max. Each process serves one untimed prompt first, and each
timed request starts once the host and every vLLM process have gone idle
(kvbench.vllm.idle): the save an earlier arm left running is never charged
to the next arm. Targets
(issue: vLLM at full speed), on SmolLM2-135M-Instruct: a miss with the
connector <= 1.02x one without, a fresh process's hit <= 0.25x a full
prefill, a kvpilot hit <= 1.2x vLLM's own prefix hit; on the save-heavy
random Llama: a miss <= 1.10x. Every hit must answer the token vLLM
alone answers.
"""

from __future__ import annotations

import logging
import random
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench.vllm.engine import EngineProcess
from kvbench.vllm.host import ServeProcess
from kvbench.vllm.idle import wait_idle
from kvbench.vllm.models import SAVE_HEAVY_LLAMA, vocab_size, write_random_llama

log = logging.getLogger("kvbench.vllm")

PAGE = 32
ARMS = (
    "no_connector_miss",
    "connector_miss",
    "connector_hit_fresh_process",
    "vllm_prefix_hit",
    "connector_hit_after_restart",
)


@dataclass(frozen=True)
class ModelSpec:
    """A model the bench runs and its targets (ratio name -> at most)."""

    name: str
    targets: dict[str, float]
    kv_cache_mib: int


MODELS = {
    "smollm2": ModelSpec(
        "smollm2",
        {
            "connector_miss_vs_no_connector_miss": 1.02,
            "connector_hit_vs_no_connector_miss": 0.25,
            "connector_hit_vs_vllm_prefix_hit": 1.2,
        },
        kv_cache_mib=320,
    ),
    "save-heavy-llama": ModelSpec(
        "save-heavy-llama", {"connector_miss_vs_no_connector_miss": 1.10}, kv_cache_mib=96
    ),
}

RATIOS = {
    "connector_miss_vs_no_connector_miss": ("connector_miss", "no_connector_miss"),
    "connector_hit_vs_no_connector_miss": ("connector_hit_fresh_process", "no_connector_miss"),
    "connector_hit_vs_vllm_prefix_hit": ("connector_hit_fresh_process", "vllm_prefix_hit"),
    "restart_hit_vs_no_connector_miss": ("connector_hit_after_restart", "no_connector_miss"),
}


def host_config() -> dict[str, Any]:
    """The host every model runs against: staging and host tiers for a few
    prompts, a disk tier that outlives a restart.
    """
    return {
        "log": {"level": "info", "format": "text"},
        "http": {"listen": ""},
        "nats": {"listen": ""},
        "index": {"page_size": PAGE},
        "tiers": {
            "device": {"capacity_pages": 1024},
            "host": {"capacity_pages": 2048},
            "disk": {"capacity_pages": 4096},
            "remote": {"capacity_pages": 0},
        },
    }


@dataclass
class ModelRun:
    """One model's measurements: per arm, per round."""

    spec: ModelSpec
    params: dict[str, Any] = field(default_factory=dict)
    ms: dict[str, list[float]] = field(default_factory=lambda: {a: [] for a in ARMS})
    cached: dict[str, list[int]] = field(default_factory=lambda: {a: [] for a in ARMS})
    answers_match: list[bool] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        arms = {
            a: {
                "ms_median": statistics.median(v),
                "ms_min": min(v),
                "ms_max": max(v),
                "cached_tokens": self.cached[a],
            }
            for a, v in self.ms.items()
            if v
        }
        ratios = {}
        for name, (num, den) in RATIOS.items():
            rs = [n / d for n, d in zip(self.ms[num], self.ms[den], strict=True) if d > 0]
            if rs:
                ratios[name] = {"median": statistics.median(rs), "min": min(rs), "max": max(rs)}
        checks = {
            name: ratios[name]["median"] <= limit for name, limit in self.spec.targets.items()
        }
        checks["hits_answer_as_vllm_alone"] = bool(self.answers_match) and all(self.answers_match)
        return {
            "params": self.params,
            "arms": arms,
            "ratios": ratios,
            "targets": {"limits": self.spec.targets, "checks": checks, "met": all(checks.values())},
        }


def run_model(
    spec: ModelSpec, binary: str, model_dir: Path, tokens: int, rounds: int, work: Path
) -> dict[str, Any]:
    """Measures every arm of one model; returns its report."""
    vocab = vocab_size(model_dir)
    kv_bytes = spec.kv_cache_mib << 20
    run = ModelRun(spec)
    run.params = {"model": str(model_dir), "tokens": tokens, "rounds": rounds, "page_size": PAGE}
    (work / "host").mkdir(parents=True, exist_ok=True)
    host = ServeProcess(binary, work / "host", host_config())
    host.start()
    engines: list[EngineProcess] = []
    try:
        base = {
            "model": str(model_dir),
            "block_size": PAGE,
            "max_model_len": tokens + 64,
            "kv_cache_memory_bytes": kv_bytes,
        }
        # A kvpilot host serves one engine: its processes share one
        # registration, and another engine's registration retires it. So
        # filler and fresh register as processes of one engine (fresh still
        # starts with nothing in its own prefix cache).
        connector = {"socket": host.engine_socket, "timeout_s": 30.0, "engine_id": "bench-vllm"}
        plain = EngineProcess("plain", {**base, "connector": None}, work / "plain.log")
        engines.append(plain)
        filler = EngineProcess("filler", {**base, "connector": connector}, work / "filler.log")
        engines.append(filler)
        fresh = EngineProcess("fresh", {**base, "connector": connector}, work / "fresh.log")
        engines.append(fresh)
        rng = random.Random(tokens)

        def prompt() -> list[int]:
            return [rng.randrange(3, vocab) for _ in range(tokens)]

        def timed(engine: EngineProcess, tokens: list[int]) -> dict[str, Any]:
            # The host's pid changes with the restart arm: asked each time.
            pids = [e.proc.pid for e in engines] + ([host.proc.pid] if host.proc else [])
            waited = wait_idle(pids)
            if waited > 0.5:
                log.info(
                    "%s: waited %.1f s for the bench's processes to go idle", engine.name, waited
                )
            return engine.ask(tokens)

        for engine in engines:  # untimed: each process's first request pays its set-up
            engine.ask(prompt()[:256])
        full = tokens // PAGE
        for r in range(rounds):
            p, q = prompt(), prompt()
            before = host.settle("host")
            # The two misses take turns going first (what one leaves in the
            # CPU's caches), each starting on idle processes.
            if r % 2 == 0:
                a, b = timed(plain, p), timed(filler, p)
            else:
                b, a = timed(filler, p), timed(plain, p)
            host.wait_pages("host", before + full)
            c = timed(fresh, p)
            d = timed(plain, p)
            before = host.settle("host")
            filler.ask(q)
            host.wait_pages("host", before + full)
            host.restart()
            e = timed(fresh, q)
            for arm, out in zip(ARMS, (a, b, c, d, e), strict=True):
                run.ms[arm].append(out["ms"])
                run.cached[arm].append(out["cached_tokens"])
            run.answers_match.append(c["token"] == a["token"])
            log.info(
                "round %d: %s; the fresh process's hit: %s",
                r,
                ", ".join(f"{arm} {run.ms[arm][-1]:.0f} ms" for arm in ARMS),
                c.get("kvpilot"),
            )
    finally:
        for engine in engines:
            engine.close()
        host.stop()
    return run.report()


def run(
    binary: str, models: list[str], tokens: int, rounds: int, workdir: Path | None
) -> dict[str, Any]:
    """The whole scenario's JSON report."""
    out: dict[str, Any] = {
        "scenario": "vllm",
        "params": {"tokens": tokens, "rounds": rounds, "models": models},
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="kvpilot-bench-vllm-") as tmp:
        root = workdir or Path(tmp)
        for name in models:
            spec = MODELS[name]
            work = root / name
            work.mkdir(parents=True, exist_ok=True)
            if name == "smollm2":
                from kvpilot.smollm2 import model_dir

                md = model_dir()
            else:
                md = write_random_llama(work / "model", SAVE_HEAVY_LLAMA)
            log.info("bench vllm: %s (%s)", name, md)
            out["models"][name] = run_model(spec, binary, md, tokens, rounds, work)
    out["targets"] = {"met": all(m["targets"]["met"] for m in out["models"].values())}
    return out
