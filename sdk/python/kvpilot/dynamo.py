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

This module does not import Dynamo; it only calls the endpoint it is given.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["EndpointPath", "host_environment", "parse_endpoint_path", "worker_identity"]

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
