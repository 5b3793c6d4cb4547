"""Prompts from the agent traces, tokenized by a model's own tokenizer and
chat template or, for the random-weight models, by a tokenizer of our own.

``ChatTokenizer`` is a model's tokenizer (SmolLM2's, from the model
directory): each message is the chat template's rendering of it, so the
prompt is the one the model was trained to read, and every message keeps
its token span (``check`` holds the spans to the template applied to the
whole conversation).

``HashTokenizer`` ("hash-words-v1") is for the random-weight models, whose
vocabularies are a few hundred ids: it splits text into word pieces (a run
of up to 12 word characters, or one other character, each with the
whitespace before it) and maps each piece to ``specials + blake2b(piece)
mod (vocab - specials)``: deterministic on every machine, about four
characters per token on English and code, and an equal piece is always an
equal token. Ids below ``specials`` are role markers; a message is ``<role>
content <end>``.

``trace_prompt`` renders a trace session (JSON Lines, see the traces'
README) as a chat prompt behind a fixed system block of its own, message by
message until a token budget, with each message's span recorded.
``truncate_tool_output`` is the edit a truncation policy makes: an early
tool output replaced by its head and tail around a marker (the built-in
truncation policy's stub), as the tokens that differ.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
        for root in (start, *start.parents):
            if (root / "go.mod").is_file() and (root / "examples" / "traces").is_dir():
                return root / "examples" / "traces"
    return None


class HashTokenizer:
    """The "hash-words-v1" tokenizer (see the module doc)."""

    name = TOKENIZER

    def __init__(self, vocab: int, specials: int = SPECIALS) -> None:
        if vocab <= specials + 1:
            raise ValueError(f"vocab {vocab} leaves no room after {specials} specials")
        self.vocab = vocab
        self.specials = specials

    @property
    def description(self) -> str:
        """What the benchmark reports as its tokenizer."""
        return (
            f"{self.name}: word pieces hashed (blake2b) into {self.vocab} ids, "
            f"{self.specials} reserved for role markers"
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        span = self.vocab - self.specials
        out = []
        for piece in _PIECE.findall(text):
            h = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
            out.append(self.specials + int.from_bytes(h, "little") % span)
        return out

    def cut(self, text: str, tokens: int) -> str:
        """The longest head of ``text`` that encodes to at most ``tokens`` tokens."""
        return "".join(_PIECE.findall(text)[: max(tokens, 0)])

    def message(self, role: str, text: str) -> list[int]:
        """``<role> text <end>``."""
        return [_ROLES.get(role, _ROLES["user"]), *self.encode(text), _END]

    def generation_prompt(self) -> list[int]:
        """What follows the last message when the model is to answer: nothing."""
        return []

    def check(self, p: Prompt) -> None:
        """Nothing to check: the rendering is this class's own."""


class ChatTokenizer:
    """A model's own tokenizer and chat template (transformers), rendering
    one message at a time so every message keeps its token span.

    A message is what the template makes of it after a system message,
    tokenized on its own; ``check`` holds the whole prompt to the template
    applied to all its messages at once, so a template whose messages do
    not tokenize apart (their boundaries are not special tokens) fails
    loudly instead of measuring another prompt than the model's.
    """

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer = tokenizer
        self.name = name
        self._anchor = [{"role": "system", "content": "."}]
        self._anchor_text = self._render(self._anchor, generation=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str], name: str = "") -> ChatTokenizer:
        """The tokenizer saved in a model directory (``transformers``)."""
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(path)), name or Path(path).name)

    @property
    def description(self) -> str:
        """What the benchmark reports as its tokenizer."""
        return f"{self.name}'s own tokenizer and chat template"

    def _render(self, messages: list[dict[str, str]], *, generation: bool) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation
            )
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens written out become theirs)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def cut(self, text: str, tokens: int) -> str:
        """A head of ``text`` that encodes to at most about ``tokens`` tokens."""
        return str(self.tokenizer.decode(self.encode(text)[: max(tokens, 0)]))

    def message(self, role: str, text: str) -> list[int]:
        """The template's rendering of one message, tokenized."""
        if role == "system":
            return self.encode(self._render([{"role": role, "content": text}], generation=False))
        full = self._render([*self._anchor, {"role": role, "content": text}], generation=False)
        if not full.startswith(self._anchor_text):
            raise ValueError(f"{self.name}'s chat template renders messages with context")
        return self.encode(full[len(self._anchor_text) :])

    def generation_prompt(self) -> list[int]:
        """The template's opening of the assistant's answer."""
        with_gen = self._render(self._anchor, generation=True)
        return self.encode(with_gen[len(self._anchor_text) :])

    def check(self, p: Prompt) -> None:
        """Raises ValueError unless ``p`` is the template applied to its messages."""
        msgs = [{"role": m.role, "content": t} for m, t in zip(p.messages, p.texts, strict=True)]
        want = self.encode(self._render(msgs, generation=bool(p.answer)))
        if want != p.tokens:
            raise ValueError(
                f"{self.name}: messages rendered one by one give another prompt than the "
                "chat template over all of them; their spans would be wrong"
            )


Tokenizer = HashTokenizer | ChatTokenizer


@dataclass
class Prompt:
    """A rendered prompt: tokens, messages with spans, and each message's
    content span (its tokens without the template's framing) and text.
    ``answer`` is the generation prompt after the last message (empty for
    the hash tokenizer, which has none).
    """

    tokens: list[int] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    content_spans: list[tuple[int, int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    answer: list[int] = field(default_factory=list)
    source: str = ""

    def add(self, tok: Tokenizer, role: str, text: str, tool_name: str = "") -> None:
        """Appends the message ``tok`` renders."""
        start = len(self.tokens)
        toks = tok.message(role, text)
        c0, c1 = _content_span(toks, tok.message(role, ""))
        self.tokens.extend(toks)
        self.messages.append(
            ChatMessage(
                role=role, content=text, tool_name=tool_name, span=(start, len(self.tokens))
            )
        )
        self.content_spans.append((start + c0, start + c1))
        self.texts.append(text)


def _content_span(message: list[int], empty: list[int]) -> tuple[int, int]:
    """Where a message's content lies among its tokens: between what it
    shares with the empty message's head and with its tail.
    """
    head, tail = _common_ends(message, empty)
    return head, len(message) - tail


def _common_ends(a: Sequence[int], b: Sequence[int]) -> tuple[int, int]:
    """How many tokens ``a`` and ``b`` share at their heads, and then at their
    tails (never overlapping the head).
    """
    n = min(len(a), len(b))
    head = 0
    while head < n and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


#: The user turn that closes every trace prompt: the new request of a
#: session whose earlier turns are cached.
CLOSING_TURN = "Run the failing test again, explain the error in one paragraph, and fix it."


def trace_prompt(
    path: Path, tok: Tokenizer, budget: int, session: int = 0, message_tokens: int = 0
) -> Prompt:
    """The ``session``-th session of a trace file as a prompt of ``budget``
    tokens (exactly, with the hash tokenizer; within a few below it with a
    real one): the system block, the trace's messages (the last one cut to
    fit; with ``message_tokens``, each cut to about that many), ``CLOSING_TURN``
    as the final user message and the tokenizer's generation prompt.
    """
    closing = tok.message("user", CLOSING_TURN)
    answer = tok.generation_prompt()
    with path.open() as f:
        for k, line in enumerate(f):
            if k == session:
                data = json.loads(line)
                break
        else:
            raise ValueError(f"{path}: no session {session}")
    p = Prompt(source=f"{path.name}#{session} ({data.get('session_id', '')})")
    p.add(tok, "system", SYSTEM_BLOCK)
    room = budget - len(closing) - len(answer)
    for m in data["messages"]:
        role, text = m.get("role", "user"), m.get("content") or ""
        if message_tokens:
            text = tok.cut(text, message_tokens)
        left = room - len(p.tokens)
        frame = len(tok.message(role, ""))
        if left <= frame:
            break
        toks = tok.message(role, text)
        # A real tokenizer may merge pieces across the cut: cut shorter
        # until the message fits.
        n = left - frame
        while len(toks) > left and text:
            text = tok.cut(text, n)
            toks = tok.message(role, text)
            n -= 1
        if len(toks) > left:
            break
        p.add(tok, role, text, m.get("tool_name") or "")
    # A real tokenizer's last message may stop a few tokens short.
    if len(p.tokens) < room - 16:
        raise ValueError(f"{path}: session {session} has only {len(p.tokens)} tokens")
    p.add(tok, "user", CLOSING_TURN)
    p.tokens.extend(answer)
    p.answer = answer
    tok.check(p)
    return p


@dataclass(frozen=True)
class Truncation:
    """An edit of one message: tokens ``[start, end)`` become ``replacement``
    (the tokens that differ between the message and its edited rendering).
    """

    message: int
    start: int
    end: int
    replacement: list[int]
    chars: int


def edit_message(p: Prompt, tok: Tokenizer, k: int, text: str, chars: int = 0) -> Truncation:
    """Message ``k`` with ``text`` as its content: the span of tokens that
    differ from the prompt's, and their replacement.
    """
    m = p.messages[k]
    old = p.tokens[m.span[0] : m.span[1]]
    new = tok.message(m.role, text)
    pre, suf = _common_ends(old, new)
    return Truncation(
        message=k,
        start=m.span[0] + pre,
        end=m.span[1] - suf,
        replacement=new[pre : len(new) - suf],
        chars=chars,
    )


def truncate_tool_output(
    p: Prompt,
    tok: Tokenizer,
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
        return edit_message(p, tok, k, stub, chars=cut)
    raise ValueError(f"no tool output of {min_tokens}+ tokens after token {after}")
