"""Splice scenarios shared by the tests and the benchmark.

``host_config`` is the host configuration the engine needs (page size,
a device tier big enough, the attention sink). ``splice_session`` runs one
amortize splice end to end: it reads the session's layer-0 rows, applies the
Splice directive on the Control socket, waits for the engine's fill and for
the host to commit the new branch, and reads the rows again, so that
kvpilot.torchengine.contract can judge them. ``Conversation`` makes
chat-shaped prompts with message spans for message-boundary edits.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kvpilot import directives
from kvpilot.control import ApplyResult, ControlClient
from kvpilot.engine_types import ChatMessage
from kvpilot.torchengine.engine import TorchEngine
from kvpilot.torchengine.fills import FillServer

log = logging.getLogger("kvpilot.torchengine")


def host_config(
    page_size: int = 16, device_pages: int = 512, sink_tokens: int = 4
) -> dict[str, Any]:
    """Config overrides for a host that serves a TorchEngine: the engine's
    page size, a device tier of ``device_pages`` and the protected sink,
    and no recompute unless a directive asks (the host's defaults would run
    the quality guard on every splice: a measurement says what it
    recomputes).
    """
    return {
        "index": {"page_size": page_size, "sink_tokens": sink_tokens},
        "splice": {"max_kl": 0, "recompute": {"first": 0}},
        "tiers": {
            "device": {"capacity_pages": device_pages},
            "host": {"capacity_pages": 2 * device_pages},
        },
    }


@dataclass
class SpliceOutcome:
    """One amortize splice, with the layer-0 rows around it.

    ``before`` holds the original sequence's cached rows, ``after`` the
    edited sequence's, each per buffer from position 0. ``apply_ms`` is the
    directive's round trip, ``fill_ms`` until the fill was answered and
    ``commit_ms`` until the edited branch was matchable.
    """

    edited: list[int]
    start: int
    end: int
    replacement: list[int]
    result: ApplyResult
    before: tuple[torch.Tensor, ...]
    after: tuple[torch.Tensor, ...]
    cached_before: int
    cached_after: int
    apply_ms: float = 0.0
    fill_ms: float = 0.0
    commit_ms: float = 0.0

    @property
    def delta(self) -> int:
        """Δ = |τ| - (end - start)."""
        return len(self.replacement) - (self.end - self.start)


def splice_session(
    engine: TorchEngine,
    fills: FillServer,
    control: ControlClient,
    *,
    session: str,
    tokens: Sequence[int],
    start: int,
    end: int,
    replacement: Sequence[int],
    tenant: str = "",
    read: bool = True,
    timeout: float = 30.0,
) -> SpliceOutcome:
    """Amortize-splices ``[start, end)`` of ``session`` (whose cached sequence
    begins with ``tokens``) by ``replacement`` and waits until the edited
    sequence's pages are cached again: the full pages ``tokens`` had, moved
    by Δ (see the module doc).

    With ``read`` False no rows are read (the benchmark's timed path).
    Raises TimeoutError when the fill or the commit does not come.
    """
    toks, rep = list(tokens), list(replacement)
    edited = toks[:start] + rep + toks[end:]
    ps = engine.page_size
    before: tuple[torch.Tensor, ...] = ()
    n_before = 0
    if read:
        n_before, before = engine.read_cached(toks, tenant=tenant)
    else:
        n_before = engine.cached_tokens(toks, tenant=tenant)
    want_fills = fills.orders + fills.failures + (1 if rep else 0)
    t0 = time.perf_counter()
    res = control.apply(
        [directives.splice(session, start, end, tokens=rep, mode="amortize")], tenant=tenant
    )
    t1 = time.perf_counter()
    if not fills.wait(want_fills, timeout):
        raise TimeoutError(f"no fill order for the splice of {session} within {timeout}s")
    if fills.failures:
        raise RuntimeError(f"fill failed: {fills.last_error}")
    t2 = time.perf_counter()
    # The host holds full pages only: after the shift the cached tokens
    # are the old ones moved by Δ, cut to whole pages.
    want = (n_before + len(rep) - (end - start)) // ps * ps
    got = engine.wait_cached(edited, want, tenant=tenant, timeout=timeout)
    t3 = time.perf_counter()
    if got < want:
        raise TimeoutError(f"only {got} of {want} edited tokens cached after {timeout}s")
    after: tuple[torch.Tensor, ...] = ()
    n_after = got
    if read:
        n_after, after = engine.read_cached(edited, tenant=tenant)
    return SpliceOutcome(
        edited=edited,
        start=start,
        end=end,
        replacement=rep,
        result=res,
        before=before,
        after=after,
        cached_before=n_before,
        cached_after=n_after,
        apply_ms=(t1 - t0) * 1e3,
        fill_ms=(t2 - t1) * 1e3,
        commit_ms=(t3 - t2) * 1e3,
    )


@dataclass
class Conversation:
    """A chat-shaped prompt: messages back to back, each a token span."""

    tokens: list[int] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)

    def add(self, role: str, toks: Sequence[int], tool_name: str = "") -> None:
        """Appends a message."""
        s = len(self.tokens)
        self.tokens.extend(int(t) for t in toks)
        self.messages.append(
            ChatMessage(role=role, tool_name=tool_name, span=(s, len(self.tokens)))
        )

    def replace(self, index: int, toks: Sequence[int]) -> Conversation:
        """A copy with message ``index``'s tokens replaced."""
        out = Conversation()
        for k, m in enumerate(self.messages):
            body = list(toks) if k == index else self.tokens[m.span[0] : m.span[1]]
            out.add(m.role, body, m.tool_name)
        return out


def random_conversation(
    rng: random.Random, vocab: int, *, turns: int = 6, lengths: tuple[int, int] = (8, 60)
) -> Conversation:
    """A system message and ``turns`` user/assistant/tool messages of random
    lengths and random tokens.
    """
    conv = Conversation()
    conv.add("system", [rng.randrange(vocab) for _ in range(24)])
    roles = ("user", "assistant", "tool")
    for k in range(turns):
        n = rng.randint(*lengths)
        role = roles[k % 3]
        conv.add(role, [rng.randrange(vocab) for _ in range(n)], "bash" if role == "tool" else "")
    return conv
