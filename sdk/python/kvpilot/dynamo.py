"""Running a kvpilot host beside a Dynamo worker (ai-dynamo 1.6.1).

Dynamo's KV router credits KV events to the worker whose instance id they
carry, so the host's ``worker_id`` must be the co-located Dynamo worker's
instance id (``endpoint.connection_id()``) and ``events.dp_rank`` its
data-parallel rank; ``events.namespace/component/endpoint`` name the
worker's endpoint, whose subject the router reads. With Dynamo's file
discovery (``DYN_FILE_KV``) the host also lists its event publisher there,
which the router requires before it takes the events.

``host_environment`` reads all of that inside the Dynamo worker process
and returns the ``KVPILOT_*`` variables to start ``kvpilot serve`` with::

    endpoint = runtime.endpoint("dynamo.backend.generate")
    env = kvpilot.dynamo.host_environment(endpoint, "dynamo.backend.generate")
    subprocess.Popen(["kvpilot", "serve"], env={**os.environ, **env})

``cache_control_handler`` serves a Dynamo endpoint (conventionally
``<namespace>.<component>.cache_control``) inside the worker, forwarding
each request to the host's Control socket; a Dynamo client reaches one
worker's with ``client.direct(request, instance_id)``::

    ctl_ep = runtime.endpoint("dynamo.backend.cache_control")
    handler = kvpilot.dynamo.cache_control_handler(control_socket, kv_block_size=16)
    await ctl_ep.serve_endpoint(handler)

Requests and replies are kvpilot's cache_control JSON:
``{"action", "block_hashes", "token_ids", "ttl_seconds", "worker_id"}`` in,
``{"status", "<pinned|unpinned|evicted>_count", "message", "worker_id"}``
out. ai-dynamo 1.6.1 itself defines no cache_control request or reply (its
source has none), so these are kvpilot's. A malformed or oversized request
gets ``{"status": "error", "code", "message"}``; the handler never raises.

This module does not import Dynamo; it only calls the endpoint it is given.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from kvpilot.control import ControlClient
from kvpilot.errors import KvpilotError
from kvpilot.ttl import parse_seconds

__all__ = [
    "ACTIONS",
    "MAX_REQUEST_ITEMS",
    "EndpointPath",
    "PageSizeMismatch",
    "NVEXT_TTL_RANGE",
    "cache_control_handler",
    "clamp_ttl",
    "host_environment",
    "parse_endpoint_path",
    "worker_identity",
]

#: The cache_control actions the host serves.
ACTIONS = frozenset(
    {"pin_blocks", "unpin_blocks", "evict_descendants", "pin_prefix", "unpin_prefix"}
)

#: The most block hashes or token ids one request may carry.
MAX_REQUEST_ITEMS = 1 << 20

EndpointPath = tuple[str, str, str]


def parse_endpoint_path(path: str) -> EndpointPath:
    """Splits Dynamo's ``namespace.component.endpoint`` (or
    ``dyn://namespace.component.endpoint``) into its three names.
    """
    bare = path.removeprefix("dyn://")
    parts = bare.split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError(
            f"Dynamo endpoint path {path!r}: want namespace.component.endpoint "
            "(three non-empty names separated by dots)"
        )
    return parts[0], parts[1], parts[2]


def worker_identity(endpoint: Any, dp_rank: int = 0) -> tuple[int, int]:
    """The Dynamo worker's (instance id, dp_rank) as the router knows it."""
    if dp_rank < 0:
        raise ValueError(f"dp_rank {dp_rank} is negative")
    return int(endpoint.connection_id()), dp_rank


def host_environment(
    endpoint: Any,
    path: str,
    *,
    dp_rank: int = 0,
    file_kv: str | None = None,
) -> dict[str, str]:
    """The ``KVPILOT_*`` variables that make a host publish for this worker.

    ``file_kv`` is Dynamo's file discovery root; by default ``DYN_FILE_KV``
    when ``DYN_DISCOVERY_BACKEND`` is ``file``. Without one no discovery
    listing is configured (etcd and Kubernetes discovery are not written
    by kvpilot).
    """
    namespace, component, name = parse_endpoint_path(path)
    worker_id, rank = worker_identity(endpoint, dp_rank)
    env = {
        "KVPILOT_WORKER_ID": str(worker_id),
        "KVPILOT_EVENTS__DP_RANK": str(rank),
        "KVPILOT_EVENTS__FORMAT": "dynamo",
        "KVPILOT_EVENTS__NAMESPACE": namespace,
        "KVPILOT_EVENTS__COMPONENT": component,
        "KVPILOT_EVENTS__ENDPOINT": name,
    }
    if file_kv is None and os.environ.get("DYN_DISCOVERY_BACKEND") == "file":
        file_kv = os.environ.get("DYN_FILE_KV")
    if file_kv:
        env["KVPILOT_EVENTS__DYNAMO_FILE_KV"] = file_kv
    return env


#: The TTL range the issue cites from Dynamo's nvext documentation (the
#: default is its lower end). ai-dynamo 1.6.1's source has no cache_control
#: TTL, so this is an option of the handler, not a reading of Dynamo.
NVEXT_TTL_RANGE = (300.0, 3600.0)


def clamp_ttl(value: Any, lo: float, hi: float) -> tuple[float | None, str]:
    """A request's TTL under clamp semantics: (seconds, warning).

    A missing TTL stays missing (the host's default applies); one outside
    [lo, hi] is clamped into it; one that does not parse becomes lo. The
    warning says what was changed, or is empty. Never raises.
    """
    if value is None:
        return None, ""
    try:
        secs = parse_seconds(value)
    except (KvpilotError, ValueError, TypeError) as e:
        return lo, f"ttl_seconds {value!r} is not a TTL ({e}); used the default {lo:g}s"
    if secs < lo or secs > hi:
        clamped = min(max(secs, lo), hi)
        return clamped, f"ttl_seconds {secs:g} is outside [{lo:g}, {hi:g}]; used {clamped:g}s"
    return secs, ""


class PageSizeMismatch(ValueError):
    """The host's page size differs from the router's block size, so the
    router's prefix hashes would name no page the host holds.
    """


def _error(code: str, message: str, worker_id: str) -> dict[str, Any]:
    return {"status": "error", "code": code, "message": message, "worker_id": worker_id}


def _check_request(req: Any) -> str | None:
    """Why req is not a cache_control request, or None."""
    if not isinstance(req, dict):
        return f"a request is a JSON object, not {type(req).__name__}"
    action = req.get("action")
    if action not in ACTIONS:
        return f"action {action!r} is not one of {sorted(ACTIONS)}"
    for key in ("block_hashes", "token_ids"):
        v = req.get(key, [])
        if not isinstance(v, list):
            return f"{key} is a list, not {type(v).__name__}"
        if len(v) > MAX_REQUEST_ITEMS:
            return f"{key} has {len(v)} items; at most {MAX_REQUEST_ITEMS}"
    for t in req.get("token_ids", []):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 2**32:
            return f"token id {t!r} is not an integer in 0..4294967295"
    for h in req.get("block_hashes", []):
        if isinstance(h, bool) or not isinstance(h, (int, str)):
            return f"block hash {h!r} is not an integer or string"
    return None


def cache_control_handler(
    control_socket: str,
    *,
    kv_block_size: int | None = None,
    worker_id: int | str = "",
    source: str = "dynamo",
    ttl_range: tuple[float, float] | None = None,
    client: Callable[[], ControlClient] | None = None,
) -> Callable[..., AsyncIterator[dict[str, Any]]]:
    """An async generator handler for ``endpoint.serve_endpoint``.

    ``kv_block_size`` is the router's ``--kv-cache-block-size``: when given,
    a host whose page size differs is refused here, naming both values.
    ``worker_id`` (the worker's instance id) is stamped on every reply.
    ``ttl_range`` (e.g. ``NVEXT_TTL_RANGE``) applies clamp semantics to
    ttl_seconds (see clamp_ttl) and reports a change as ``warning`` in the
    reply; without it the host's own TTL rules apply, and an invalid TTL is
    an error reply.
    """
    make = client or (lambda: ControlClient(control_socket, source=source))
    ctl = make()
    if kv_block_size is not None:
        page = ctl.stats().page_size_tokens
        if page != kv_block_size:
            ctl.close()
            raise PageSizeMismatch(
                f"kvpilot host page size {page} tokens differs from the router's "
                f"kv block size {kv_block_size}: set index.page_size: {kv_block_size} "
                f"on the host or --kv-cache-block-size {page} on the router"
            )
    wid = str(worker_id)

    def call(req: dict[str, Any]) -> dict[str, Any]:
        ttl, warning = req.get("ttl_seconds"), ""
        if ttl_range is not None:
            ttl, warning = clamp_ttl(ttl, *ttl_range)
        try:
            r = ctl.cache_control(
                req["action"],
                block_hashes=req.get("block_hashes", []),
                token_ids=req.get("token_ids", []),
                ttl_seconds=ttl,
                check=False,
            )
        except KvpilotError as e:
            return _error(e.code or "error", str(e), wid)
        except (ValueError, TypeError) as e:
            return _error("bad_request", str(e), wid)
        out = r.to_dict()
        out["worker_id"] = wid
        if warning:
            out["warning"] = warning
        return out

    async def handler(request: Any, context: Any = None) -> AsyncIterator[dict[str, Any]]:
        why = _check_request(request)
        if why is not None:
            yield _error("bad_request", why, wid)
            return
        # The Control client is blocking gRPC: keep it off the event loop.
        yield await asyncio.to_thread(call, request)

    return handler
