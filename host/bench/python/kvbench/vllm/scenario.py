"""The arms of ``kvpilot bench vllm``, measured in one run, interleaved.

Per model, one kvpilot host and, started anew each round, three vLLM
processes (kvbench.vllm.engine): ``plain`` without the connector,
``filler`` and ``fresh`` with it. Each round takes two new random prompts
P1 and P2 of about ``tokens`` tokens and measures each arm twice, in ABBA order (A, B, B, A):

- ``no_connector_miss`` / ``connector_miss``: plain computes P1 (vLLM
  alone, nothing cached), filler computes P1, filler computes P2, plain
  computes P2; filler saves its pages to kvpilot behind each request, and
  the round then waits for them to reach kvpilot's host tier (not timed);
- ``connector_hit_fresh_process`` / ``vllm_prefix_hit``: fresh, which
  never saw either prompt, is served P1's prefix from kvpilot; plain
  computes P1 again, from its own prefix cache; then plain P2, fresh P2;
- ``connector_hit_after_restart``: filler computes a third prompt R, the
  host is stopped with SIGTERM and started again on the same data, and
  fresh asks for R: what survived the restart is served (the disk tier;
  the staging and host tiers are memory), and the request never fails.

Why ABBA: the machine's load drifts over the seconds a round takes, and a
request that runs first leaves the CPU's caches in another state for the
next. Two arms measured A, B, B, A have the same mean time within the
round and each goes first once, so a round's ratio (the sum of one arm's
two times over the other's) carries neither a linear drift nor an order
effect, in every round on its own; alternating which arm goes first
across rounds cancels them only on average over an even number of
rounds. Each arm's two requests in a round are the same kind of request
(a miss on a prompt its process never saw, or a hit on one it did).

Ratios are taken per round and their median reported, with the min and
max. Each process serves one untimed prompt first, and each timed request
starts once the host and every vLLM process have gone idle
(kvbench.vllm.idle): the save an earlier arm left running is never
charged to the next arm. Targets (issue: vLLM at full speed), on
SmolLM2-135M-Instruct: a miss with the connector <= 1.02x one without, a
fresh process's hit <= 0.25x a full prefill, a kvpilot hit <= 1.2x vLLM's
own prefix hit; on the save-heavy random Llama: a miss <= 1.10x. Every hit
must answer the token vLLM alone answers.
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
from kvbench.vllm.models import (
    SAVE_HEAVY_LLAMA,
    TINY_DEEPSEEK_V2,
    vocab_size,
    write_random_deepseek_v2,
    write_random_llama,
)

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
    """A model the bench runs, in one of the configurations (CONFIGS), and
    its targets (ratio name -> at most).
    """

    name: str
    targets: dict[str, float]
    kv_cache_mib: int
    config: str = "bf16"
    #: vLLM's --kv-cache-dtype.
    kv_cache_dtype: str = "auto"
    #: vLLM's block, kvpilot's page (vLLM's CPU MLA kernels take 16).
    page: int = PAGE
    #: vLLM's --tensor-parallel-size (a worker process per rank).
    tensor_parallel_size: int = 1


#: Targets of a configuration on a random model, where a full prefill is
#: cheap: a miss with the connector within 10% of one without, a fresh
#: process's hit at most a quarter of a full prefill.
_RANDOM_TARGETS = {
    "connector_miss_vs_no_connector_miss": 1.10,
    "connector_hit_vs_no_connector_miss": 0.25,
}

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
    # SmolLM2 with an fp8 KV cache: half the bytes a page.
    "smollm2-fp8": ModelSpec(
        "smollm2-fp8",
        {
            "connector_miss_vs_no_connector_miss": 1.02,
            "connector_hit_vs_no_connector_miss": 0.25,
            "connector_hit_vs_vllm_prefix_hit": 1.2,
        },
        kv_cache_mib=160,
        config="fp8",
        kv_cache_dtype="fp8_e4m3",
    ),
    # A DeepSeek-V2 geometry (MLA): vLLM turns its own prefix cache off for
    # MLA on CPU, so its "prefix hit" computes the prompt again.
    "deepseek-v2-mla": ModelSpec(
        "deepseek-v2-mla",
        {**_RANDOM_TARGETS, "connector_hit_vs_vllm_prefix_hit": 0.25},
        kv_cache_mib=96,
        config="mla",
        page=16,
    ),
    # The save-heavy Llama over two tensor-parallel ranks, a KV head each.
    "tp2-llama": ModelSpec(
        "tp2-llama", dict(_RANDOM_TARGETS), kv_cache_mib=96, config="tp2", tensor_parallel_size=2
    ),
    # The save-heavy Llama with a sliding-window layer beside each full one.
    "hybrid-swa-llama": ModelSpec(
        "hybrid-swa-llama", dict(_RANDOM_TARGETS), kv_cache_mib=96, config="swa"
    ),
}

#: The configurations --config takes, and the models each runs.
CONFIGS = {
    c: tuple(name for name, m in MODELS.items() if m.config == c)
    for c in dict.fromkeys(m.config for m in MODELS.values())
}

RATIOS = {
    "connector_miss_vs_no_connector_miss": ("connector_miss", "no_connector_miss"),
    "connector_hit_vs_no_connector_miss": ("connector_hit_fresh_process", "no_connector_miss"),
    "connector_hit_vs_vllm_prefix_hit": ("connector_hit_fresh_process", "vllm_prefix_hit"),
    "restart_hit_vs_no_connector_miss": ("connector_hit_after_restart", "no_connector_miss"),
}


def host_config(page: int = PAGE) -> dict[str, Any]:
    """The host every model runs against: staging and host tiers for a few
    prompts, a disk tier that outlives a restart.
    """
    return {
        "log": {"level": "info", "format": "text"},
        "http": {"listen": ""},
        "nats": {"listen": ""},
        "index": {"page_size": page},
        "tiers": {
            "device": {"capacity_pages": 1024},
            "host": {"capacity_pages": 2048},
            "disk": {"capacity_pages": 4096},
            "remote": {"capacity_pages": 0},
        },
    }


@dataclass
class ModelRun:
    """One model's measurements: per round, per arm, each request's."""

    spec: ModelSpec
    params: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, list[float]]] = field(default_factory=list)
    cached: dict[str, list[int]] = field(default_factory=lambda: {a: [] for a in ARMS})
    #: Per prompt served from a cache: the token the kvpilot hit answered,
    #: vLLM's own prefix hit's, and vLLM's full prefill's.
    answers: list[tuple[Any, Any, Any]] = field(default_factory=list)

    def add(self, r: int, arm: str, out: dict[str, Any]) -> dict[str, Any]:
        """Records one request of arm in round r; returns out."""
        while len(self.rounds) <= r:
            self.rounds.append({a: [] for a in ARMS})
        self.rounds[r][arm].append(out["ms"])
        self.cached[arm].append(out["cached_tokens"])
        return out

    def report(self) -> dict[str, Any]:
        ms = {a: [t for rd in self.rounds for t in rd[a]] for a in ARMS}
        arms = {
            a: {
                "ms_median": statistics.median(v),
                "ms_min": min(v),
                "ms_max": max(v),
                "cached_tokens": self.cached[a],
            }
            for a, v in ms.items()
            if v
        }
        ratios = {}
        for name, (num, den) in RATIOS.items():
            # A round's ratio: the mean of one arm's requests in the round
            # over the other's.
            rs = [
                statistics.fmean(rd[num]) / statistics.fmean(rd[den])
                for rd in self.rounds
                if rd[num] and rd[den] and min(rd[den]) > 0
            ]
            if rs:
                ratios[name] = {"median": statistics.median(rs), "min": min(rs), "max": max(rs)}
        checks = {
            name: ratios[name]["median"] <= limit for name, limit in self.spec.targets.items()
        }
        # vLLM alone serving the same prefix from its own cache (for MLA on
        # CPU, computing it again) answers what a kvpilot hit must; with an
        # fp8 cache that is not always the full prefill's token (a prefix
        # hit reads quantized keys a full prefill never does).
        checks["hits_answer_as_vllm_alone"] = bool(self.answers) and all(
            hit == own for hit, own, _ in self.answers
        )
        return {
            "params": self.params,
            "answers": {
                "kvpilot_hit_as_full_prefill": sum(h == f for h, _, f in self.answers),
                "vllm_prefix_hit_as_full_prefill": sum(o == f for _, o, f in self.answers),
                "kvpilot_hit_as_vllm_prefix_hit": sum(h == o for h, o, _ in self.answers),
                "hits": len(self.answers),
            },
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
    page = spec.page
    run.params = {
        "model": str(model_dir),
        "config": spec.config,
        "kv_cache_dtype": spec.kv_cache_dtype,
        "tensor_parallel_size": spec.tensor_parallel_size,
        "tokens": tokens,
        "rounds": rounds,
        "page_size": page,
    }
    (work / "host").mkdir(parents=True, exist_ok=True)
    host = ServeProcess(binary, work / "host", host_config(page))
    host.start()
    engines: list[EngineProcess] = []
    try:
        base = {
            "model": str(model_dir),
            "block_size": page,
            "max_model_len": tokens + 64,
            "kv_cache_memory_bytes": kv_bytes,
            "kv_cache_dtype": spec.kv_cache_dtype,
            "tensor_parallel_size": spec.tensor_parallel_size,
        }
        # A kvpilot host serves one engine: its processes share one
        # registration, and another engine's registration retires it. So
        # filler and fresh register as processes of one engine (fresh still
        # starts with nothing in its own prefix cache).
        connector = {"socket": host.engine_socket, "timeout_s": 30.0, "engine_id": "bench-vllm"}
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

        full = tokens // page
        for r in range(rounds):
            # New processes every round: a process keeps its speed for its
            # life (misses up to a fifth apart between two of them here),
            # so one process per arm for a whole run would make that
            # difference the run's ratio.
            for engine in engines:
                engine.close()
            engines.clear()
            for name, conn in [("plain", None), ("filler", connector), ("fresh", connector)]:
                cfg = {**base, "connector": conn}
                engines.append(EngineProcess(name, cfg, work / f"{name}{r}.log"))
            plain, filler, fresh = engines
            for engine in engines:  # untimed: each process's first request pays its set-up
                engine.ask(prompt()[:256])
            ps, q = [prompt(), prompt()], prompt()
            before = host.settle("host")
            # ABBA (see the module doc), each request on idle processes.
            alone: dict[int, Any] = {}
            for arm, engine, i in [
                ("no_connector_miss", plain, 0),
                ("connector_miss", filler, 0),
                ("connector_miss", filler, 1),
                ("no_connector_miss", plain, 1),
            ]:
                out = run.add(r, arm, timed(engine, ps[i]))
                if engine is plain:
                    alone[i] = out["token"]
            host.wait_pages("host", before + 2 * full)
            kvpilot = None
            answered: dict[tuple[str, int], Any] = {}
            for arm, engine, i in [
                ("connector_hit_fresh_process", fresh, 0),
                ("vllm_prefix_hit", plain, 0),
                ("vllm_prefix_hit", plain, 1),
                ("connector_hit_fresh_process", fresh, 1),
            ]:
                out = run.add(r, arm, timed(engine, ps[i]))
                answered[(arm, i)] = out["token"]
                if engine is fresh:
                    kvpilot = out.get("kvpilot")
            for i in (0, 1):
                hit = answered[("connector_hit_fresh_process", i)]
                run.answers.append((hit, answered[("vllm_prefix_hit", i)], alone[i]))
            before = host.settle("host")
            filler.ask(q)
            host.wait_pages("host", before + full)
            host.restart()
            run.add(r, "connector_hit_after_restart", timed(fresh, q))
            log.info(
                "round %d: %s; the fresh process's last hit: %s",
                r,
                ", ".join(
                    f"{arm} {'/'.join(f'{t:.0f}' for t in run.rounds[r][arm])} ms" for arm in ARMS
                ),
                kvpilot,
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
            md = _model_dir(name, work)
            log.info("bench vllm: %s (%s)", name, md)
            out["models"][name] = run_model(spec, binary, md, tokens, rounds, work)
    out["targets"] = {"met": all(m["targets"]["met"] for m in out["models"].values())}
    return out


def _model_dir(name: str, work: Path) -> Path:
    """The model directory of a bench model: SmolLM2's, or seeded random
    weights written under work.
    """
    if name.startswith("smollm2"):
        from kvpilot.smollm2 import model_dir

        return model_dir()
    if name == "deepseek-v2-mla":
        return write_random_deepseek_v2(work / "model", {**TINY_DEEPSEEK_V2, **_LONG})
    if name == "hybrid-swa-llama":
        hybrid = ["sliding_attention", "full_attention"] * (
            SAVE_HEAVY_LLAMA["num_hidden_layers"] // 2
        )
        cfg = {**SAVE_HEAVY_LLAMA, "layer_types": hybrid, "sliding_window": 1024}
        return write_random_llama(work / "model", cfg)
    return write_random_llama(work / "model", SAVE_HEAVY_LLAMA)


#: Room for the bench's prompts.
_LONG = {"max_position_embeddings": 8192}
