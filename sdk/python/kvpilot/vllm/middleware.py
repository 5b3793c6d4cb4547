"""Refuses, in vLLM's OpenAI server, a request whose
``kv_transfer_params["kvpilot"]`` is malformed: 400 with the connector's
message, before the request reaches the engine.

Without it the connector refuses such a request in vLLM's engine core,
where the only way to fail one request is to finish it with
``FinishReason.ERROR``, which vLLM's server always answers ``500 Internal
server error`` (vllm/v1/engine/__init__.py, the installed vLLM 0.32): the
reason stays in the server's log, and a client retries a request that can
never succeed. vLLM's server runs the ASGI middleware its ``--middleware``
flag names in the API server process, ahead of every route, so the same
check (``RequestParams.parse``) runs there::

    --middleware kvpilot.vllm.middleware.refuse_malformed_params
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from vllm.entrypoints.serve.engine.protocol import ErrorInfo, ErrorResponse

from kvpilot.vllm.params import RequestParams, RequestParamsError

__all__ = ["refuse_malformed_params"]


async def refuse_malformed_params(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Answers 400 in vLLM's error shape when a JSON request body's
    ``kv_transfer_params`` holds a malformed kvpilot object.

    Every other request passes on untouched (a body that is not JSON is
    vLLM's to refuse). Named by vLLM's ``--middleware`` flag.
    """
    if request.method != "POST" or "json" not in request.headers.get("content-type", ""):
        return await call_next(request)
    try:
        body = json.loads(await request.body())
    except ValueError:
        return await call_next(request)
    if isinstance(body, dict) and "kv_transfer_params" in body:
        try:
            RequestParams.parse(body["kv_transfer_params"])
        except RequestParamsError as e:
            err = ErrorInfo(
                message=f"kvpilot connector: {e}",
                type="BadRequestError",
                param="kv_transfer_params",
                code=HTTPStatus.BAD_REQUEST,
            )
            return JSONResponse(
                ErrorResponse(error=err).model_dump(), status_code=HTTPStatus.BAD_REQUEST
            )
    return await call_next(request)
