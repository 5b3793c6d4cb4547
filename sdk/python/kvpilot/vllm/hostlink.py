"""Connecting a connector process to its kvpilot host, or failing clearly.

At start-up a problem is the operator's to fix, so it stops vLLM with one
message that names the setting to change: no host on the socket, a host
holding another model's pages, a layout the host refuses. After start-up
the connector degrades instead (kvpilot.hosthealth).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kvpilot.engine import EngineClient
from kvpilot.engine_types import FEATURE_COMMIT_PARTS, Registration
from kvpilot.errors import InvalidLayout, KvpilotError, LayoutConflict, Unavailable
from kvpilot.unixsock import socket_problem
from kvpilot.vllm.geometry import Geometry
from kvpilot.vllm.settings import KEY_PREFIX, ConnectorConfigError, ConnectorSettings

# Registering at start-up may wait for a host that is still starting.
_REGISTER_TIMEOUT_S = 15.0


def check_socket(settings: ConnectorSettings) -> None:
    """Raises ConnectorConfigError unless a host accepts on the socket."""
    why = socket_problem(settings.socket, timeout=2.0)
    if why is not None:
        raise ConnectorConfigError(
            f"kvpilot connector: no kvpilot host at {KEY_PREFIX}.socket={settings.socket} "
            f"({why}): start `kvpilot serve` with engine.socket at that path (default "
            f"<data_dir>/run/engine.sock), or set {KEY_PREFIX}.socket to the socket it serves"
        )


def connect(
    settings: ConnectorSettings,
    geo: Geometry,
    engine_id: str,
    *,
    reset_cache: bool,
    log: logging.Logger,
    on_reregister: Callable[[Registration], None] | None = None,
) -> EngineClient:
    """Registers this process with the host in connector mode.

    Processes of one engine pass the same engine_id and geometry and so
    share one registration. Raises ConnectorConfigError naming the setting
    to change.
    """
    check_socket(settings)
    where = f"the kvpilot host at {KEY_PREFIX}.socket={settings.socket}"
    try:
        client = EngineClient(
            settings.socket,
            geo.layout,
            geo.rope,
            engine_id=engine_id,
            mode="connector",
            reset_cache=reset_cache,
            timeout=_REGISTER_TIMEOUT_S,
            on_reregister=on_reregister,
            parts=geo.parts,
            logger=log,
        )
    except LayoutConflict as e:
        raise ConnectorConfigError(
            f"kvpilot connector: {where} holds pages of another KV layout, or refuses this one "
            f"({e.detail}); this vLLM registers {geo.describe()}. Point {KEY_PREFIX}.socket at "
            f"a kvpilot host for this model, or set {KEY_PREFIX}.reset_cache=true to drop that "
            "host's cache"
        ) from None
    except InvalidLayout as e:
        raise ConnectorConfigError(
            f"kvpilot connector: {where} refused this vLLM's KV layout ({e.detail}); it "
            f"registers {geo.describe()}: vLLM's --block-size is kvpilot's page size"
        ) from None
    except Unavailable as e:
        raise ConnectorConfigError(
            f"kvpilot connector: could not register with {where}: {e.detail}; check that "
            f"`kvpilot serve` runs there, or set {KEY_PREFIX}.socket to the socket it serves"
        ) from None
    except KvpilotError as e:
        raise ConnectorConfigError(
            f"kvpilot connector: registering with {where} failed: {e}"
        ) from None
    if geo.parts > 1 and FEATURE_COMMIT_PARTS not in client.registration.features:
        client.close()
        raise ConnectorConfigError(
            f"kvpilot connector: {where} does not take pages written by "
            f"{geo.parts} tensor-parallel ranks (it lacks the {FEATURE_COMMIT_PARTS} feature): "
            "upgrade the kvpilot host, or run vLLM with --tensor-parallel-size 1"
        )
    return client
