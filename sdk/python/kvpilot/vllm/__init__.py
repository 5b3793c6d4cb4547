"""kvpilot for vLLM: ``KvpilotConnector``, a KV connector on a kvpilot host.

Select it without patching vLLM::

    --kv-transfer-config '{"kv_connector": "KvpilotConnector",
                           "kv_connector_module_path": "kvpilot.vllm",
                           "kv_role": "kv_both",
                           "kv_connector_extra_config": {"socket": "<engine.sock>"}}'

Importing this package imports vLLM. See kvpilot.vllm.connector for what the
connector does, kvpilot.vllm.settings for its settings and
kvpilot.vllm.params for the per-request ``kv_transfer_params``.
"""

from __future__ import annotations

from kvpilot.vllm.connector import KvpilotConnector
from kvpilot.vllm.params import PARAMS_KEY, RequestParams, RequestParamsError
from kvpilot.vllm.settings import ConnectorConfigError, ConnectorSettings

__all__ = [
    "PARAMS_KEY",
    "ConnectorConfigError",
    "ConnectorSettings",
    "KvpilotConnector",
    "RequestParams",
    "RequestParamsError",
]
