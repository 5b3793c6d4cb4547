r"""Edits of real agent sessions, tokenized by SmolLM2, for splice-quality.

A case is a context taken from a trace session (kvbench.traces' format),
one edit a harness or a kvpilot policy makes to it, and the assistant turn
that came next in the session, which the benchmark scores by teacher
forcing:

- ``truncate``: the oldest tool output in the context of 300 to 900 tokens
  becomes the truncation policy's head/tail stub (its defaults: 200
  characters kept around a "[... N chars truncated ...]" marker);
- ``clear``: Anthropic's ``clear_tool_uses`` as the front door applies it
  (every tool result but the last three becomes its placeholder);
- ``think``: the think-evict policy on the Opus session, whose reasoning is
  rendered as ``<think>…</think>`` at the head of its assistant turns: every
  block but the most recent is stripped.

Rendering. Each message is SmolLM2's chat template,
``<|im_start|>role\\ncontent<|im_end|>\\n``, tokenized on its own; an
assistant tool call is ``<tool_call>name\\narguments</tool_call>``; a
message is cut to its first ``MESSAGE_TOKENS`` tokens in every arm. A
context is the session's opening (its leading system and user messages,
each cut to ``OPENING_TOKENS``) and then the most recent messages before
the scored turn that fit in ``--context-tokens``, ending with the
generation prompt ``<|im_start|>assistant\\n``. Dropping the middle of a
long session is what a compacting harness does; it keeps contexts inside
what two CPU cores score in minutes.

Names. A case is ``<trace>#<session>@<turn>:<kind>``: the trace file's
stem, the session's line in it, the index of the scored assistant message
and the edit's kind. ``build_cases`` makes the same cases, in the same
order, on every machine: kinds in turn, and sessions in turn within a kind
(``interleave``), so the first N span every kind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Kinds of edit, in the order cases are listed.
KINDS = ("truncate", "clear", "think")
#: A message's content is cut to this many tokens.
MESSAGE_TOKENS = 900
#: Each opening message (system, first user) is cut to this many tokens.
OPENING_TOKENS = 384
#: The scored continuation: at most this many tokens of the next turn.
CONTINUATION_TOKENS = 128
#: A continuation shorter than this is not scored (a bare tool call).
MIN_CONTINUATION = 24
#: A case needs at least this many tokens after its first edit.
MIN_REGION = 320
#: The truncation policy's stub length and the front door's placeholder.
STUB_CHARS = 200
CLEARED = "[tool result cleared by context management]"
#: clear_tool_uses keeps the last this many tool results.
KEEP_TOOL_USES = 3


@dataclass(frozen=True)
class Edit:
    """Tokens ``[start, end)`` of the original context become ``replacement``."""

    start: int
    end: int
    replacement: tuple[int, ...]

    @property
    def delta(self) -> int:
        """Δ = |replacement| - (end - start)."""
        return len(self.replacement) - (self.end - self.start)


@dataclass
class Case:
    """One edit of one context, and the turn that followed it."""

    name: str
    kind: str
    original: list[int]
    edited: list[int]
    edits: list[Edit]
    continuation: list[int]
    messages: int = 0
    #: Where the request's new messages begin in ``original``: the trailing
    #: run of tool and user messages, or the generation prompt when the
    #: context ends with the assistant's turn. The previous turn's cache
    #: ends before them, so a front door prefills them fresh after the
    #: splice. It follows the last edit (no case edits what the request
    #: brings: none of it was cached).
    fresh_from: int = 0
    #: Where the previous turn's answer begins in ``original`` (after its
    #: role header, which closed the previous request's prompt): an engine
    #: that saves prompts only, as the vLLM connector does, cached the
    #: context up to here, and the answer is new to it too.
    answer_from: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


def stub(text: str, max_chars: int = STUB_CHARS) -> str:
    """The truncation policy's head/tail stub of ``text`` (policies/truncation
    Stub): ``max_chars`` characters, half from each end, around a marker;
    "" when the stub would not be shorter.
    """
    head = max_chars // 2
    tail = max_chars - head
    cut = len(text) - head - tail
    if cut <= 0:
        return ""
    s = text[:head] + f"\n[... {cut} chars truncated ...]\n" + text[len(text) - tail :]
    return s if len(s.encode()) < len(text.encode()) else ""


class Renderer:
    """Messages to SmolLM2 tokens (see the module doc)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        # Finding cases renders the same messages in many windows: each
        # text is tokenized once.
        self._ids: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens in it recognised)."""
        ids = self._ids.get(text)
        if ids is None:
            ids = self._ids[text] = tuple(self.tok.encode(text, add_special_tokens=False))
        return list(ids)

    def cut(self, text: str, limit: int) -> str:
        """``text`` cut to its first ``limit`` tokens."""
        ids = self.encode(text)
        return text if len(ids) <= limit else self.tok.decode(ids[:limit])

    def content(self, m: dict[str, Any], *, think: bool = True) -> str:
        """A trace message's content as the template shows it."""
        text = m.get("content") or ""
        if m.get("role") == "assistant" and m.get("tool_name"):
            text = f"<tool_call>{m['tool_name']}\n{text}</tool_call>"
        if think and m.get("thinking"):
            text = f"<think>\n{m['thinking']}\n</think>\n{text}"
        return text

    def message(self, role: str, content: str) -> list[int]:
        """One message's tokens."""
        return self.encode(f"<|im_start|>{role}\n{content}<|im_end|>\n")

    def prompt(self) -> list[int]:
        """The generation prompt."""
        return self.encode("<|im_start|>assistant\n")


@dataclass
class _Msg:
    role: str
    content: str
    raw: dict[str, Any]
    index: int


def _load(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open() as f:
        for k, line in enumerate(f):
            if line.strip():
                yield k, json.loads(line)


def _role(m: dict[str, Any]) -> str:
    r = m.get("role") or "user"
    return r if r in ("system", "user", "assistant", "tool") else "user"


def _window(r: Renderer, msgs: list[dict[str, Any]], target: int, budget: int) -> list[_Msg] | None:
    """The context before ``msgs[target]``: the opening, then the most
    recent messages that fit in ``budget`` tokens (with the prompt).
    """
    opening: list[_Msg] = []
    k = 0
    while k < target and _role(msgs[k]) in ("system", "user"):
        m = msgs[k]
        opening.append(_Msg(_role(m), r.cut(r.content(m), OPENING_TOKENS), m, k))
        k += 1
    used = sum(len(r.message(m.role, m.content)) for m in opening) + len(r.prompt())
    recent: list[_Msg] = []
    for j in range(target - 1, k - 1, -1):
        m = msgs[j]
        c = r.cut(r.content(m), MESSAGE_TOKENS)
        n = len(r.message(_role(m), c))
        if used + n > budget:
            break
        recent.append(_Msg(_role(m), c, m, j))
        used += n
    if not recent:
        return None
    return opening + recent[::-1]


def _edit_contents(kind: str, r: Renderer, ctx: list[_Msg]) -> dict[int, str]:
    """Per position in ``ctx``, the edited content (only messages that change)."""
    out: dict[int, str] = {}
    tools = [p for p, m in enumerate(ctx) if m.role == "tool" and m.raw is not None]
    if kind == "truncate":
        for p in tools:
            n = len(r.encode(ctx[p].content))
            if 300 <= n <= MESSAGE_TOKENS and (s := stub(ctx[p].content)):
                out[p] = s
                break
    elif kind == "clear":
        for p in tools[: max(len(tools) - KEEP_TOOL_USES, 0)]:
            if ctx[p].content != CLEARED:
                out[p] = CLEARED
    elif kind == "think":
        # The reasoning of the last assistant turn (its run of messages) stays.
        last = len(ctx)
        while last > 0 and ctx[last - 1].role != "assistant":
            last -= 1
        while last > 0 and ctx[last - 1].role == "assistant":
            last -= 1
        for p, m in enumerate(ctx[:last]):
            if m.role == "assistant" and m.raw.get("thinking"):
                out[p] = r.cut(r.content(m.raw, think=False), MESSAGE_TOKENS)
    return out


def _diff(old: list[int], new: list[int], at: int) -> Edit:
    """The one edit turning message tokens ``old`` into ``new`` (common
    head and tail kept), in context coordinates from ``at``.
    """
    a = 0
    while a < min(len(old), len(new)) and old[a] == new[a]:
        a += 1
    b = 0
    while b < min(len(old), len(new)) - a and old[-1 - b] == new[-1 - b]:
        b += 1
    return Edit(at + a, at + len(old) - b, tuple(new[a : len(new) - b]))


def make_case(
    r: Renderer, name: str, kind: str, msgs: list[dict[str, Any]], target: int, budget: int
) -> Case | None:
    """The case of ``kind`` scoring ``msgs[target]``, or None when the
    context holds no such edit (or too little after it).
    """
    if _role(msgs[target]) != "assistant":
        return None
    cont = r.encode(r.content(msgs[target]))
    if len(cont) < MIN_CONTINUATION:
        return None
    cont = (cont + r.encode("<|im_end|>"))[:CONTINUATION_TOKENS]
    ctx = _window(r, msgs, target, budget)
    if ctx is None:
        return None
    changed = _edit_contents(kind, r, ctx)
    if not changed:
        return None
    original: list[int] = []
    edited: list[int] = []
    edits: list[Edit] = []
    fresh = answer = 0
    header = r.prompt()
    for p, m in enumerate(ctx):
        if m.role != "assistant" and (p == 0 or ctx[p - 1].role == "assistant"):
            fresh = len(original)
        old = r.message(m.role, m.content)
        if m.role == "assistant":
            at = len(original)
            answer = at + len(header) if old[: len(header)] == header else at
        if p in changed:
            new = r.message(m.role, changed[p])
            e = _diff(old, new, len(original))
            if e.end > e.start or e.replacement:
                edits.append(e)
            edited.extend(new)
        else:
            edited.extend(old)
        original.extend(old)
    if ctx[-1].role == "assistant":
        fresh = len(original)
    prompt = r.prompt()
    original += prompt
    edited += prompt
    if not edits or len(edited) - edits[0].start < MIN_REGION:
        return None
    if edits[-1].end > fresh:
        # The edit reaches into what the request brings: nothing of it was
        # cached, so there is nothing to splice.
        return None
    return Case(
        name=name,
        kind=kind,
        original=original,
        edited=edited,
        edits=edits,
        continuation=cont,
        messages=len(ctx),
        fresh_from=fresh,
        answer_from=answer,
        meta={"edited_messages": [ctx[p].index for p in sorted(changed)]},
    )


def apply_edits(tokens: Sequence[int], edits: Sequence[Edit]) -> list[int]:
    """``tokens`` with ``edits`` (sorted, disjoint) applied."""
    out: list[int] = []
    at = 0
    for e in edits:
        out.extend(tokens[at : e.start])
        out.extend(e.replacement)
        at = e.end
    out.extend(tokens[at:])
    return out


#: ``build_cases``'s turns per session and kind for the held-out set
#: (``--set held-out``): more of each session's turns, of which those the
#: default set does not hold are the held-out cases, never used to tune
#: the guard.
HELD_OUT_PER_SESSION = {"truncate": 5, "clear": 3, "think": 12}


def build_cases(
    tokenizer: Any,
    traces: Path,
    *,
    budget: int = 2048,
    per_session: dict[str, int] | None = None,
) -> list[Case]:
    """Every case of the traces in ``traces``: per session and kind, up to
    ``per_session[kind]`` scored turns spread evenly over the session (the
    defaults: two truncations, one clear, six reasoning strips), each a
    context of at most ``budget`` tokens.
    """
    want = per_session or {"truncate": 2, "clear": 1, "think": 6}
    r = Renderer(tokenizer)
    cases: list[Case] = []
    for path in sorted(traces.glob("*.jsonl")):
        for k, data in _load(path):
            msgs = data.get("messages") or []
            for kind in KINDS:
                n = want.get(kind, 0)
                if n <= 0:
                    continue
                found = _spread(r, path.stem, k, kind, msgs, budget, n)
                cases.extend(found)
    return interleave(cases)


def interleave(cases: Sequence[Case]) -> list[Case]:
    """``cases`` in the order ``--cases N`` takes them: kinds in turn, and
    within a kind the sessions in turn, so the first few cases already span
    every kind and several sessions.
    """
    by_kind: dict[str, dict[str, list[Case]]] = {}
    for c in cases:
        by_kind.setdefault(c.kind, {}).setdefault(c.name.split("@")[0], []).append(c)
    queues = [_round_robin(list(by.values())) for by in by_kind.values()]
    return _round_robin(queues)


def _round_robin(lists: Sequence[Sequence[Case]]) -> list[Case]:
    out: list[Case] = []
    for k in range(max((len(x) for x in lists), default=0)):
        out.extend(x[k] for x in lists if k < len(x))
    return out


def _spread(
    r: Renderer,
    stem: str,
    session: int,
    kind: str,
    msgs: list[dict[str, Any]],
    budget: int,
    n: int,
) -> list[Case]:
    """Up to ``n`` cases of one session and kind: for each of ``n`` evenly
    spaced points, the first scored turn at or after it (wrapping around)
    that makes a case whose context no earlier case has.
    """
    out: list[Case] = []
    seen: set[tuple[int, ...]] = set()
    for q in range(n):
        start = len(msgs) * q // n
        for t in (*range(start, len(msgs)), *range(start)):
            c = make_case(r, f"{stem}#{session}@{t}:{kind}", kind, msgs, t, budget)
            if c is None or tuple(c.original) in seen:
                continue
            out.append(c)
            seen.add(tuple(c.original))
            break
    return out


def check_case(c: Case) -> None:
    """Raises ValueError when a case's edits do not turn its original
    context into its edited one.
    """
    if apply_edits(c.original, c.edits) != c.edited:
        raise ValueError(f"{c.name}: its edits do not give its edited context")
    for a, b in zip(c.edits, c.edits[1:], strict=False):
        if b.start < a.end:
            raise ValueError(f"{c.name}: edits overlap")
