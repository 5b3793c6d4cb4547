"""kvpilot: the Python SDK of the kvpilot KV-cache host.

kvpilot's host runs beside an inference engine and owns its KV pools. This
package is what a Python engine or operator links:

- ``EngineClient`` (kvpilot.engine): register a KV layout, map the host's
  pools zero-copy (``Arena``: numpy and torch views), and match, allocate,
  commit, release and finish requests; survives host restarts.
- ``ControlClient`` (kvpilot.control): apply directives (pin, splice,
  pause...), the router's cache_control API, stats and KV events.
- ``kvpilot.errors``: every error the host can send, one class per code.
- ``Layout`` and friends (kvpilot.layout): the KV byte geometry.

Quick start::

    from kvpilot import EngineClient, Layout

    layout = Layout.mha("my-model", page_size=16, dtype="bf16", layers=2,
                        kv_heads=2, head_dim=64)
    with EngineClient("kvpilot-data/run/engine.sock", layout) as c:
        m = c.match(prompt_tokens, session="chat-1")
        ...

See sdk/python/README.md.
"""

from __future__ import annotations

from kvpilot.arena import Arena, ArenaError
from kvpilot.control import ApplyResult, CacheControlResult, ControlClient, DirectiveResult, Stats
from kvpilot.engine import EngineClient
from kvpilot.engine_types import (
    AllocateResult,
    CacheControl,
    ChatMessage,
    CommitResult,
    FillOrder,
    FinishResult,
    MatchResult,
    Registration,
    Usage,
)
from kvpilot.errors import HostRestarted, KvpilotError
from kvpilot.layout import Buffer, Layout, RopeConfig, RopeScaling, RopeSlice

__version__ = "0.1.0"

__all__ = [
    "AllocateResult",
    "ApplyResult",
    "Arena",
    "ArenaError",
    "Buffer",
    "CacheControl",
    "CacheControlResult",
    "ChatMessage",
    "CommitResult",
    "ControlClient",
    "DirectiveResult",
    "EngineClient",
    "FillOrder",
    "FinishResult",
    "HostRestarted",
    "KvpilotError",
    "Layout",
    "MatchResult",
    "Registration",
    "RopeConfig",
    "RopeScaling",
    "RopeSlice",
    "Stats",
    "Usage",
]
