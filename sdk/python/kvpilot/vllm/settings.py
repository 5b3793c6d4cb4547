"""The connector's settings: vLLM's ``kv_connector_extra_config``.

Every key is checked when vLLM creates the connector, so a typo or a missing
socket stops vLLM at start-up with one message naming the key to change,
rather than serving silently without a cache.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from kvpilot import extraconfig

#: The prefix of every setting in messages: where the user sets it.
KEY_PREFIX = "kv_connector_extra_config"

#: The connector logs under vLLM's logger, so vLLM's logging configuration
#: (level, format, VLLM_LOGGING_LEVEL) covers its messages too.
LOGGER_NAME = "vllm.kvpilot"

_EXAMPLE = (
    '--kv-transfer-config \'{"kv_connector":"KvpilotConnector",'
    '"kv_connector_module_path":"kvpilot.vllm","kv_role":"kv_both",'
    '"kv_connector_extra_config":{"socket":"/path/to/engine.sock"}}\''
)

ROPE_STYLES = ("", "half_split", "interleaved")


class ConnectorConfigError(ValueError):
    """A setting of the kvpilot connector is missing or wrong.

    The message names the setting (``kv_connector_extra_config.<key>``) and
    says what to set it to.
    """


@dataclass(frozen=True)
class ConnectorSettings:
    """What ``kv_connector_extra_config`` may hold.

    Attributes:
        socket: the kvpilot host's engine socket (required; ``kvpilot serve``
            logs it, ``<data_dir>/run/engine.sock`` by default).
        timeout_s: seconds one call to the host may take before the request
            goes on without kvpilot.
        load_back_deadline_ms: how long a match may wait for pages coming back
            from kvpilot's host, disk or remote tiers (0: the host's own
            ``engine.load_back_deadline``).
        retry_after_s: after a failed call, the connector leaves the host
            alone this long (doubling up to a minute while it keeps failing)
            and vLLM serves without kvpilot meanwhile.
        engine_id: the id this vLLM engine registers under; by default one
            derived from vLLM's ``kv_transfer_config.engine_id``, which the
            scheduler and the workers of one engine share.
        model: the model name the KV layout registers under; by default
            vLLM's served model name. Pages are shared only between engines
            that register the same name, so it must name the weights.
        reset_cache: drop every page the host holds when registering (needed
            to serve a different model or layout from a host that still
            holds pages of the old one).
        rope_style: the pairing of rotated key elements, ``half_split``
            (NeoX: Llama, Qwen, Mistral) or ``interleaved`` (GPT-J, GLM);
            by default taken from the model type.
        save_queue_pages: pages the worker may have waiting to be saved
            behind the forward; vLLM keeps a finished request's blocks until
            its saves are done, so this bounds the blocks held for kvpilot.
            A save that does not fit is skipped (counted): a future miss.
        save_wait_ms: how long a step may wait for room in a full save queue
            before it skips the save (0: never waits).
        loss_log_interval_s: after the first page lost to each reason (a
            skipped or failed save, logged at once), lost pages are summed
            up in one log line at most this often.
        control_socket: the host's Control socket, whose event stream puts
            kvpilot's pages into vLLM's KV events when vLLM publishes them
            (``--kv-events-config``); by default ``control.sock`` beside
            ``socket``.
    """

    socket: str
    timeout_s: float = 2.0
    load_back_deadline_ms: int = 500
    retry_after_s: float = 5.0
    engine_id: str = ""
    model: str = ""
    reset_cache: bool = False
    rope_style: str = ""
    save_queue_pages: int = 4096
    save_wait_ms: int = 0
    loss_log_interval_s: float = 60.0
    control_socket: str = ""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The setting names, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any] | None) -> ConnectorSettings:
        """Reads and checks ``kv_connector_extra_config``.

        Raises ConnectorConfigError naming the first bad key.
        """
        extra = dict(extra or {})
        unknown = extraconfig.first_unknown(extra, cls.names())
        if unknown is not None:
            raise ConnectorConfigError(
                f"kvpilot connector: {KEY_PREFIX}.{unknown} is not a setting of the kvpilot "
                f"connector (known: {', '.join(cls.names())})"
            )
        sock = extra.get("socket")
        if not isinstance(sock, str) or not sock.strip():
            raise ConnectorConfigError(
                f"kvpilot connector: {KEY_PREFIX}.socket is not set: set it to the engine socket "
                "of the kvpilot host beside this vLLM (`kvpilot serve` logs it; "
                f"<data_dir>/run/engine.sock by default), e.g. {_EXAMPLE}"
            )
        socket = os.path.abspath(os.path.expanduser(sock.strip()))
        control = _string(extra, "control_socket")
        return cls(
            socket=socket,
            timeout_s=_number(extra, "timeout_s", cls.timeout_s, low=0.05, high=600.0),
            load_back_deadline_ms=int(
                _number(extra, "load_back_deadline_ms", cls.load_back_deadline_ms, 0, 600_000)
            ),
            retry_after_s=_number(extra, "retry_after_s", cls.retry_after_s, low=0.0, high=3600.0),
            engine_id=_string(extra, "engine_id"),
            model=_string(extra, "model"),
            reset_cache=_flag(extra, "reset_cache"),
            rope_style=_choice(extra, "rope_style", ROPE_STYLES),
            save_queue_pages=int(
                _number(extra, "save_queue_pages", cls.save_queue_pages, 1, 1 << 24, whole=True)
            ),
            control_socket=(
                os.path.abspath(os.path.expanduser(control))
                if control
                else os.path.join(os.path.dirname(socket), "control.sock")
            ),
            save_wait_ms=int(
                _number(extra, "save_wait_ms", cls.save_wait_ms, 0, 60_000, whole=True)
            ),
            loss_log_interval_s=_number(
                extra, "loss_log_interval_s", cls.loss_log_interval_s, low=1.0, high=86_400.0
            ),
        )


def _bad(key: str, value: Any, want: str) -> ConnectorConfigError:
    return ConnectorConfigError(f"kvpilot connector: {KEY_PREFIX}.{key} = {value!r}: want {want}")


def _number(
    extra: Mapping[str, Any],
    key: str,
    default: float,
    low: float,
    high: float,
    *,
    whole: bool = False,
) -> float:
    return extraconfig.number(extra, key, default, low, high, _bad, whole=whole)


def _string(extra: Mapping[str, Any], key: str) -> str:
    return extraconfig.string(extra, key, _bad)


def _flag(extra: Mapping[str, Any], key: str) -> bool:
    return extraconfig.flag(extra, key, _bad)


def _choice(extra: Mapping[str, Any], key: str, choices: tuple[str, ...]) -> str:
    v = extra.get(key, "")
    if v not in choices:
        raise ConnectorConfigError(
            f"kvpilot connector: {KEY_PREFIX}.{key} = {v!r}: want one of "
            f"{', '.join(repr(c) for c in choices if c)}"
        )
    return str(v)
