r"""kvpilot for SGLang: ``KvpilotStorage``, HiCache's L3 storage tier on a kvpilot host.

SGLang loads it without patches::

    python -m sglang.launch_server --model-path MODEL --page-size 16 \\
        --enable-hierarchical-cache --hicache-mem-layout page_first \\
        --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \\
        '{"backend_name": "kvpilot", "module_path": "kvpilot.sglang",
          "class_name": "KvpilotStorage", "interface_v1": 1,
          "hicache_storage_pass_prefix_keys": true,
          "socket": "/run/kvpilot/engine.sock"}'

SGLang's page size is kvpilot's (``index.page_size``). Importing this package
imports SGLang. See kvpilot.sglang.storage for what the backend does,
kvpilot.sglang.settings for its settings, kvpilot.sglang.ledger for how
SGLang's page keys map to kvpilot's block identity and tenants.
"""

from __future__ import annotations

from kvpilot.sglang.settings import StorageConfigError, StorageSettings
from kvpilot.sglang.storage import KvpilotStorage

__all__ = ["KvpilotStorage", "StorageConfigError", "StorageSettings"]
