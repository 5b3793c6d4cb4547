"""How a malformed ``kv_transfer_params`` reaches a client of vLLM's OpenAI
server: kvpilot's ``--middleware`` answers 400 with the connector's message.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from kvpilot.vllm.middleware import refuse_malformed_params


def test_middleware_refuses_malformed_params() -> None:
    """The middleware alone, in a FastAPI app as vLLM's server mounts it:
    a malformed kvpilot object is 400 in vLLM's error shape; anything else
    reaches the route with its body intact."""
    seen: list[bytes] = []

    async def complete(request: Request) -> JSONResponse:
        seen.append(await request.body())
        return JSONResponse({"ok": True})

    app = FastAPI()
    app.post("/v1/chat/completions")(complete)
    app.middleware("http")(refuse_malformed_params)
    client = TestClient(app)
    bad = {"model": "m", "kv_transfer_params": {"kvpilot": {"tenant": 5}}}
    r = client.post("/v1/chat/completions", json=bad)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "BadRequestError" and err["param"] == "kv_transfer_params"
    assert err["message"].startswith("kvpilot connector: kv_transfer_params.kvpilot.tenant")
    good = {"model": "m", "kv_transfer_params": {"kvpilot": {"tenant": "acme"}, "other": 1}}
    assert client.post("/v1/chat/completions", json=good).status_code == 200
    assert client.post("/v1/chat/completions", content=b"not json").status_code == 200
    assert [json.loads(seen[0]), seen[1]] == [good, b"not json"], "the route lost the body"
