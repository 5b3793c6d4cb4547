"""The values EngineClient's calls take and return (Go: sdk/engineclient)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvpilot.errors import KvpilotError

#: Engine modes (README: "Two engine modes").
MODE_ARENA = "arena"
MODE_CONNECTOR = "connector"

#: Features a host announces at registration (RegisterResponse.features).
#: CommitRequest.first_page: a commit of the pages from first_page on.
FEATURE_COMMIT_FIRST_PAGE = "commit_first_page"
#: RegisterRequest.parts with AllocateRequest.part and CommitRequest.part:
#: pages written in slices by several processes (tensor-parallel ranks),
#: cached once every part committed its slice.
FEATURE_COMMIT_PARTS = "commit_parts"


@dataclass(frozen=True)
class Registration:
    """The host's answer to Register.

    ``generation`` counts registrations by this client from 1; it grows when
    the client registers again after a host restart (``boot_id`` changes).
    ``joined``: a connector-mode process joined the live registration of the
    same engine (another of its processes) instead of replacing it.
    ``features``: what the host does beyond the API's version 1
    (``FEATURE_*``); a client uses a feature only with a host that has it.
    """

    id: str
    boot_id: str
    worker_id: str
    fingerprint: int
    page_size: int
    page_bytes: int
    reattached: bool
    joined: bool
    cached_pages: int
    generation: int
    mode: str
    features: tuple[str, ...] = ()


@dataclass
class ChatMessage:
    """A chat message of the prompt with its token span ``[start, end)``.

    ``thinking`` lists the thinking spans inside it; ``thinking_text`` is the
    thinking when the request carried it as a separate field.
    """

    role: str
    content: str = ""
    tool_name: str = ""
    span: tuple[int, int] = (0, 0)
    thinking: list[tuple[int, int]] = field(default_factory=list)
    thinking_text: str = ""


@dataclass(frozen=True)
class MatchResult:
    """The cached prefix handed to a request.

    ``page_slots`` (device slots, root first) cover ``cached_tokens`` and are
    locked for the request until release or finish. ``block_hashes`` are the
    sequence hashes of every full page of the prompt. ``generation`` is the
    registration the request runs under.
    """

    request_id: str
    cached_tokens: int
    page_slots: list[int]
    block_hashes: list[int]
    loaded_pages: int
    loaded_bytes: int
    load_back_us: int
    load_back_incomplete: bool
    dropped_pages: int
    page_size: int
    generation: int = 0


@dataclass(frozen=True)
class AllocateResult:
    """Device slots for the request's prefill, and pages evicted to make room."""

    page_slots: list[int]
    evicted_pages: int


@dataclass(frozen=True)
class CommitResult:
    """Pages newly stored, pages already present, and their sequence hashes."""

    stored: int
    present: int
    block_hashes: list[int]
    #: A part's commit: parts yet to commit these pages (0: they are cached).
    parts_waiting: int = 0


@dataclass(frozen=True)
class Usage:
    """A finished request's token accounting."""

    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class CacheControl:
    """A request's ``{"type": "ephemeral", "ttl": ...}``.

    ``ttl`` is a duration string ("5m", "1h", "30s"), seconds, a timedelta,
    or None for the host's default.
    """

    type: str = "ephemeral"
    ttl: str | float | timedelta | None = None

    def ttl_string(self) -> str:
        """The ttl as the wire carries it ("" for the host's default)."""
        t = self.ttl
        if t is None:
            return ""
        if isinstance(t, timedelta):
            t = t.total_seconds()
        if isinstance(t, (int, float)):
            return f"{t:g}"
        return t


@dataclass(frozen=True)
class FinishResult:
    """A finish: freed slots and the pin's outcome.

    ``pin_error`` says why a requested pin failed (budget, quota); the
    request finished anyway.
    """

    freed_slots: int
    pinned: bool
    pinned_blocks: int
    total_blocks: int
    ttl_ms: int
    pin_error: KvpilotError | None = None


@dataclass(frozen=True)
class RecomputeCandidates:
    """Kept tokens of a splice an engine may recompute beside a fill order's
    own tokens (an engine registered with ``recompute``).

    ``positions`` and ``tokens`` are the candidates (kept tokens after the
    first edit that the order does not name, all in the order's pages);
    ``region`` counts every kept token after the first edit, the order's
    included. The engine recomputes ``share`` of ``region`` (those its
    staleness signal ranks first), and, with ``max_kl`` (the quality
    guard), as many as its estimate of the mean KL per token against a
    re-prefill needs to stay within it: all of them when nothing less will.
    ``echo`` (with ``max_kl``) are the candidates the host found repeating
    the removed text, in a run of 8 tokens it holds too: the guard weighs
    their staleness more (kvpilot.torchengine.staleness).
    """

    positions: list[int]
    tokens: list[int]
    share: float = 0.0
    max_kl: float = 0.0
    region: int = 0
    echo: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class FillOrder:
    """Prefill work the host asks for (a splice replacement, and the kept
    tokens a splice recomputes).

    Prefill ``tokens`` at positions ``[position, position + len(tokens))`` of
    the session's sequence, attending to the prefix held in
    ``prefix_page_slots``, and write their K/V into ``page_slots`` starting
    ``first_offset`` rows into the first page; then ``complete_fill``.

    A sparse order sets ``positions`` (``tokens[k]`` sits at
    ``positions[k]``): ``page_slots`` then run from the page of ``position``
    to the page of the last position, and each token attends to every row
    before its own, just written or kept. ``candidates`` (or None) are kept
    tokens to choose among as well.
    """

    order_id: str
    session: str
    tenant: str
    position: int
    tokens: list[int]
    page_slots: list[int]
    first_offset: int
    prefix_page_slots: list[int]
    positions: list[int] = field(default_factory=list)
    candidates: RecomputeCandidates | None = None

    @property
    def sparse(self) -> bool:
        """Whether the order names positions or candidates."""
        return bool(self.positions) or self.candidates is not None
