"""The connector's host health: kvpilot.hosthealth, shared with the SGLang backend."""

from __future__ import annotations

from kvpilot.hosthealth import HostHealth, host_down

__all__ = ["HostHealth", "host_down"]
