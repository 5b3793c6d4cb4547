"""Prompts from the agent traces, tokenized without a downloaded tokenizer.

``HashTokenizer`` ("hash-words-v1") splits text into word pieces (a run of
up to 12 word characters, or one other character, each with the whitespace
before it) and maps each piece to ``specials + blake2b(piece) mod (vocab -
specials)``: deterministic on every machine, about four characters per
token on English and code, and an equal piece is always an equal token, so
repeated text makes repeated tokens as a real tokenizer's would. Ids below
``specials`` are role markers.

``trace_prompt`` renders a trace session (JSON Lines, see the traces'
README) as a chat prompt behind a fixed system block of its own, message by
message until a token budget, each message ``<role> content <end>`` with its
span recorded. ``truncate_tool_output`` is the edit a truncation policy
makes: an early tool output replaced by its head and tail around a marker
(the built-in truncation policy's stub).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kvpilot.engine_types import ChatMessage

TOKENIZER = "hash-words-v1"
_PIECE = re.compile(r"\s*(?:\w{1,12}|[^\w\s])|\s+")
_ROLES = {"system": 1, "user": 2, "assistant": 3, "tool": 4}
_END = 5
SPECIALS = 8

#: The fixed system block in front of every trace prompt (the traces carry
#: no system prompt of their own; their README asks a benchmark to add one
#: and say so).
SYSTEM_BLOCK = (
    "You are a coding agent working in a terminal on a real repository. "
    "You read files, run commands and tests, and edit code until the task is done. "
    "Tools: Bash (run a shell command and return its output), Read (return a file's "
    "lines with numbers), Edit (replace an exact string in a file), Write (create a file), "
    "Grep (search file contents with a regular expression), Glob (list files matching "
    "a pattern). Keep answers short; prefer small, verified steps; run the tests after "
    "each change; never invent file contents you have not read. When a command fails, "
    "read its output and fix the cause rather than retrying blindly. "
) * 3


#: The environment variable naming the traces directory (as the Go side's).
TRACES_ENV = "KVPILOT_TRACES"


def find_traces_dir(given: str = "") -> Path | None:
    """The traces directory: ``given``, else ``$KVPILOT_TRACES``, else the
    repository's ``examples/traces`` (found above the working directory, or
    above this file in a source checkout), else None.
    """
    for d in (given, os.environ.get(TRACES_ENV, "")):
        if d:
            return Path(d)
    for start in (Path.cwd().resolve(), Path(__file__).resolve().parent):
        for d in (start, *start.parents):
            if (d / "go.mod").is_file() and (d / "examples" / "traces").is_dir():
                return d / "examples" / "traces"
    return None


class HashTokenizer:
    """The "hash-words-v1" tokenizer (see the module doc)."""

    name = TOKENIZER

    def __init__(self, vocab: int, specials: int = SPECIALS) -> None:
        if vocab <= specials + 1:
            raise ValueError(f"vocab {vocab} leaves no room after {specials} specials")
        self.vocab = vocab
        self.specials = specials

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        span = self.vocab - self.specials
        out = []
        for piece in _PIECE.findall(text):
            h = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
            out.append(self.specials + int.from_bytes(h, "little") % span)
        return out


@dataclass
class Prompt:
    """A rendered prompt: tokens, messages with spans, and each message's
    content span (inside its role marker and end marker) and text.
    """

    tokens: list[int] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    content_spans: list[tuple[int, int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    source: str = ""

    def add(self, role: str, content: list[int], text: str, tool_name: str = "") -> None:
        """Appends ``<role> content <end>``."""
        start = len(self.tokens)
        self.tokens.append(_ROLES.get(role, _ROLES["user"]))
        c0 = len(self.tokens)
        self.tokens.extend(content)
        c1 = len(self.tokens)
        self.tokens.append(_END)
        self.messages.append(
            ChatMessage(
                role=role, content=text, tool_name=tool_name, span=(start, len(self.tokens))
            )
        )
        self.content_spans.append((c0, c1))
        self.texts.append(text)


#: The user turn that closes every trace prompt: the new request of a
#: session whose earlier turns are cached.
CLOSING_TURN = "Run the failing test again, explain the error in one paragraph, and fix it."


def trace_prompt(path: Path, tok: HashTokenizer, budget: int, session: int = 0) -> Prompt:
    """The ``session``-th session of a trace file as a prompt of exactly
    ``budget`` tokens: the system block, the trace's messages (the last one
    cut to fit) and ``CLOSING_TURN`` as the final user message.
    """
    closing = tok.encode(CLOSING_TURN)
    with path.open() as f:
        for k, line in enumerate(f):
            if k == session:
                data = json.loads(line)
                break
        else:
            raise ValueError(f"{path}: no session {session}")
    p = Prompt(source=f"{path.name}#{session} ({data.get('session_id', '')})")
    p.add("system", tok.encode(SYSTEM_BLOCK), SYSTEM_BLOCK)
    room = budget - len(closing) - 2
    for m in data["messages"]:
        left = room - len(p.tokens) - 2
        if left <= 0:
            break
        text = m.get("content") or ""
        body = tok.encode(text)[:left]
        p.add(m.get("role", "user"), body, text, m.get("tool_name") or "")
    if len(p.tokens) < room:
        raise ValueError(f"{path}: session {session} has only {len(p.tokens)} tokens")
    p.add("user", closing, CLOSING_TURN)
    return p


@dataclass(frozen=True)
class Truncation:
    """An edit of one message's content: tokens ``[start, end)`` become
    ``replacement``.
    """

    message: int
    start: int
    end: int
    replacement: list[int]
    chars: int


def truncate_tool_output(
    p: Prompt,
    tok: HashTokenizer,
    *,
    min_tokens: int = 200,
    after: int = 0,
    head: int = 160,
    tail: int = 80,
) -> Truncation:
    """Stubs the first tool output of at least ``min_tokens`` tokens that
    starts at or after token ``after``: its head and tail characters around
    a "[... N characters truncated ...]" marker.
    """
    for k, m in enumerate(p.messages):
        c0, c1 = p.content_spans[k]
        if m.role != "tool" or c1 - c0 < min_tokens or c0 < after or c1 >= len(p.tokens):
            continue
        text = p.texts[k]
        cut = max(len(text) - head - tail, 0)
        stub = f"{text[:head]}\n[... {cut} characters truncated ...]\n{text[-tail:]}"
        return Truncation(message=k, start=c0, end=c1, replacement=tok.encode(stub), chars=cut)
    raise ValueError(f"no tool output of {min_tokens}+ tokens after token {after}")
