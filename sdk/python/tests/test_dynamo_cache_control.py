"""kvpilot.dynamo's cache_control endpoint inside a real Dynamo runtime: a
Dynamo client reaches one worker's endpoint with client.direct(request,
instance_id), and the host applies the request. Malformed and oversized
requests get structured errors; a host page size that differs from the
router's block size is refused at start. Skipped without
ai-dynamo-runtime."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

dynamo_core = pytest.importorskip(
    "dynamo._core", reason="ai-dynamo-runtime is not installed (pip install ai-dynamo-runtime)"
)

from dynamo_wire import cache_control_endpoint  # noqa: E402

import kvpilot.dynamo  # noqa: E402
from kvpilot import ControlClient, EngineClient, Layout  # noqa: E402

PAGE = 16
LAYOUT = Layout.mha("dyn-cc", page_size=PAGE, dtype="fp16", layers=1, kv_heads=1, head_dim=8)
PATH = "kvpcc.backend.cache_control"


def commit_prefix(c: EngineClient, tokens: list[int], session: str) -> list[int]:
    m = c.match(tokens, session=session)
    a = c.allocate(m.request_id, len(tokens) // PAGE - len(m.page_slots))
    r = c.commit(m.request_id, tokens, m.page_slots + a.page_slots)
    c.finish(m.request_id)
    return r.block_hashes


def test_page_size_mismatch_refused(kvpilot_host: Any) -> None:
    with pytest.raises(kvpilot.dynamo.PageSizeMismatch, match=r"page size 16 .* block size 32"):
        kvpilot.dynamo.cache_control_handler(kvpilot_host.control_socket, kv_block_size=32)


def test_cache_control_through_dynamo(kvpilot_host: Any, tmp_path: Any) -> None:
    tokens = list(range(40_000, 40_000 + 3 * PAGE))
    with EngineClient(kvpilot_host.engine_socket, LAYOUT) as c:
        commit_prefix(c, tokens, "cc")

    async def run() -> list[dict[str, Any]]:
        async with cache_control_endpoint(
            kvpilot_host.control_socket, PATH, PAGE, str(tmp_path / "dynamo-kv")
        ) as ask:
            return [
                await ask({"action": "pin_prefix", "token_ids": tokens, "ttl_seconds": 300}),
                await ask({"action": "pin_everything", "block_hashes": [1]}),
                await ask(["not", "an", "object"]),
                await ask(
                    {
                        "action": "pin_blocks",
                        "block_hashes": [0] * (kvpilot.dynamo.MAX_REQUEST_ITEMS + 1),
                    }
                ),
                await ask({"action": "pin_prefix", "token_ids": [-1]}),
                await ask({"action": "unpin_prefix", "token_ids": tokens}),
            ]

    pinned, unknown, not_obj, oversized, bad_token, unpinned = asyncio.run(run())
    assert pinned["status"] == "ok" and pinned["pinned_count"] == 3, pinned
    assert pinned["worker_id"] != ""
    for bad in (unknown, not_obj, oversized, bad_token):
        assert bad["status"] == "error" and bad["code"] == "bad_request" and bad["message"], bad
    assert "at most" in oversized["message"]
    assert unpinned["status"] == "ok" and unpinned["unpinned_count"] == 3, unpinned
    with ControlClient(kvpilot_host.control_socket) as ctl:
        assert ctl.stats().tiers["device"].pinned_pages == 0
