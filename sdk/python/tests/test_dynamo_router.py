"""A real Dynamo KV router routes on kvpilot's events.

Two Dynamo workers (file discovery, event plane on NATS) each have a kvpilot
host configured from ``kvpilot.dynamo.host_environment`` read in the worker:
its worker_id is the worker's instance id (``connection_id()``), and it
lists its event publisher in Dynamo's file discovery store
(``events.dynamo_file_kv``). Dynamo's ``KvRouter`` then scores each worker
with the prefix its kvpilot holds and picks it, and the score drops when
the host prunes. Skipped without ai-dynamo-runtime.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

dynamo_core = pytest.importorskip(
    "dynamo._core", reason="ai-dynamo-runtime is not installed (pip install ai-dynamo-runtime)"
)

from ports import free_port  # noqa: E402

import kvpilot.dynamo  # noqa: E402
from kvpilot import ControlClient, EngineClient, Layout  # noqa: E402

PAGE = 16
LAYOUT = Layout.mha("dyn-router", page_size=PAGE, dtype="fp16", layers=1, kv_heads=1, head_dim=8)
NS, COMPONENT, ENDPOINT = "kvprouter", "backend", "generate"


def commit_prefix(c: EngineClient, tokens: list[int], session: str) -> list[int]:
    m = c.match(tokens, session=session)
    a = c.allocate(m.request_id, len(tokens) // PAGE - len(m.page_slots))
    r = c.commit(m.request_id, tokens, m.page_slots + a.page_slots)
    c.finish(m.request_id)
    return r.block_hashes


async def _handler(request: Any, context: Any = None) -> Any:
    yield {"token_ids": []}


PATH = f"{NS}.{COMPONENT}.{ENDPOINT}"


def _config_from_env(env: dict[str, str]) -> dict[str, Any]:
    """The config overrides the KVPILOT_* variables stand for (the test
    fixture starts hosts from a config file and drops KVPILOT_*)."""
    ev = {k.removeprefix("KVPILOT_EVENTS__").lower(): v for k, v in env.items() if "EVENTS__" in k}
    ev["dp_rank"] = int(ev["dp_rank"])
    return {"worker_id": int(env["KVPILOT_WORKER_ID"]), "events": ev}


async def _worker(loop: Any, file_kv: str) -> tuple[Any, Any, int, dict[str, str]]:
    rt = dynamo_core.DistributedRuntime(loop, "file", "tcp", event_plane="nats")
    ep = rt.endpoint(PATH)
    await dynamo_core.register_model(
        dynamo_core.ModelInput.Tokens,
        dynamo_core.ModelType.Chat,
        ep,
        "kvpilot-test-model",
        "kvpilot-test",
        worker_type=dynamo_core.WorkerType.Aggregated,
        kv_cache_block_size=PAGE,
        skip_model_assets=True,
    )
    serving = asyncio.ensure_future(ep.serve_endpoint(_handler))
    # What the worker process hands its kvpilot host.
    env = kvpilot.dynamo.host_environment(ep, PATH, file_kv=file_kv)
    return rt, serving, ep.connection_id(), env


def test_dynamo_router_picks_the_worker_whose_kvpilot_holds_the_prefix(
    kvpilot_host_factory: Any, tmp_path: Any
) -> None:
    port = free_port()
    disc = tmp_path / "dynamo-kv"
    disc.mkdir()
    os.environ["NATS_SERVER"] = f"nats://127.0.0.1:{port}"
    os.environ["DYN_FILE_KV"] = str(disc)
    prompt_a = list(range(20_000, 20_000 + 4 * PAGE))
    prompt_b = list(range(30_000, 30_000 + 3 * PAGE))

    async def run() -> None:
        loop = asyncio.get_running_loop()
        # A first host only serves the NATS server everyone uses: it must
        # be up before Dynamo's runtimes connect, and the hosts that stand
        # beside the workers need the workers' ids first.
        kvpilot_host_factory(nats={"listen": f"127.0.0.1:{port}"}, events={"format": "json"})
        url = {"url": f"nats://127.0.0.1:{port}", "listen": ""}
        rt1, s1, w1, env1 = await _worker(loop, str(disc))
        rt2, s2, w2, env2 = await _worker(loop, str(disc))
        assert w1 != w2
        runtimes = [rt1, rt2]
        try:
            assert (
                env1["KVPILOT_WORKER_ID"] == str(w1)
                and env1["KVPILOT_EVENTS__ENDPOINT"] == ENDPOINT
            )
            ha = kvpilot_host_factory(nats=url, **_config_from_env(env1))
            hb = kvpilot_host_factory(nats=url, **_config_from_env(env2))
            rtr = dynamo_core.DistributedRuntime(loop, "file", "tcp", event_plane="nats")
            runtimes.append(rtr)
            router = dynamo_core.KvRouter(rtr.endpoint(PATH), PAGE, dynamo_core.KvRouterConfig())
            await asyncio.sleep(1.0)
            with (
                EngineClient(ha.engine_socket, LAYOUT) as ca,
                EngineClient(hb.engine_socket, LAYOUT) as cb,
            ):
                seq_a = commit_prefix(ca, prompt_a, "a")
                commit_prefix(cb, prompt_b, "b")

            async def device_blocks(tokens: list[int]) -> dict[int, int]:
                r = await router.get_overlap_scores(tokens)
                return {w["worker_id"]: w["device_blocks"] for w in r["workers"]}

            deadline = time.monotonic() + 20
            while True:
                got_a, got_b = await device_blocks(prompt_a), await device_blocks(prompt_b)
                if got_a.get(w1) == 4 and got_b.get(w2) == 3:
                    break
                assert time.monotonic() < deadline, (got_a, got_b, ha.log_tail(), hb.log_tail())
                await asyncio.sleep(0.2)
            assert got_a.get(w2, 0) == 0 and got_b.get(w1, 0) == 0
            assert await router.best_worker(prompt_a) == (w1, 0, 4)
            assert await router.best_worker(prompt_b) == (w2, 0, 3)

            # Host A prunes after the first page: the router's score for
            # worker A drops to 1 as the removals arrive.
            with ControlClient(ha.control_socket) as ctl:
                ctl.cache_control("evict_descendants", block_hashes=[seq_a[0]])
            deadline = time.monotonic() + 20
            while (got := await device_blocks(prompt_a)).get(w1) != 1:
                assert time.monotonic() < deadline, got
                await asyncio.sleep(0.2)
        finally:
            for rt in runtimes:
                rt.shutdown()
            s1.cancel()
            s2.cancel()

    try:
        asyncio.run(run())
    finally:
        os.environ.pop("NATS_SERVER", None)
        os.environ.pop("DYN_FILE_KV", None)
