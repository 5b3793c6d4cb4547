"""Where a splice-quality case's request starts bringing what the cache
lacks (``Case.fresh_from``), on hand-made sessions and a character-level
tokenizer (no model): the trailing run of tool and user messages, the
generation prompt when the context ends with the assistant's turn; a
context whose edit reaches into them makes no case. For an engine that
saves prompts only, the previous answer too (``Case.answer_from``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kvbench import qualityarms
from kvbench.editcases import Case, Edit, Renderer, apply_edits, make_case
from kvbench.splicequality import Runner


class CharTokenizer:
    """One token per character: enough to place messages exactly."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(ch) for ch in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


R = Renderer(CharTokenizer())
LONG = "line of tool output\n" * 20  # 400 characters: a truncation's target
ANSWER = "The fix goes in the parser, where the header is read twice."


def msg(role: str, content: str, **kw: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **kw}


def start_of(case_tokens: list[int], role: str, content: str) -> int:
    """Where the message rendered from ``role`` and ``content`` starts."""
    rendered = R.message(role, content)
    for k in range(len(case_tokens) - len(rendered), -1, -1):
        if case_tokens[k : k + len(rendered)] == rendered:
            return k
    raise AssertionError(f"{role} message not in the context")


TWO_TURNS = [
    msg("system", "You fix bugs."),
    msg("user", "The parser reads the header twice."),
    msg("assistant", "cat parser.py", tool_name="bash"),
    msg("tool", LONG),
    msg("assistant", "grep header parser.py", tool_name="bash"),
    msg("tool", "12: read_header()" + " # first read" * 10),
    msg("assistant", ANSWER),
]


def test_fresh_from_is_the_trailing_tool_run() -> None:
    msgs = [
        *TWO_TURNS[:6],
        msg("tool", "40: read_header()" + " # second read" * 10),
        msg("assistant", ANSWER),
    ]
    c = make_case(R, "t#0@7:truncate", "truncate", msgs, 7, 4096)
    assert c is not None
    assert apply_edits(c.original, c.edits) == c.edited
    assert c.fresh_from == start_of(c.original, "tool", "12: read_header()" + " # first read" * 10)
    assert c.edits[-1].end <= c.fresh_from


def test_answer_from_is_the_previous_answer() -> None:
    # An engine that saves prompts only cached the context up to the
    # previous answer: its role header closed the previous prompt.
    c = make_case(R, "t#0@6:truncate", "truncate", TWO_TURNS, 6, 4096)
    assert c is not None
    a = c.answer_from
    assert c.original[a - len(R.prompt()) : a] == R.prompt()
    assert R.tok.decode(c.original[a : c.fresh_from]) == R.content(TWO_TURNS[4]) + "<|im_end|>\n"
    assert c.edits[-1].end <= a


def test_each_flow_caches_up_to_its_boundary() -> None:
    c = make_case(R, "t#0@6:truncate", "truncate", TWO_TURNS, 6, 4096)
    assert c is not None
    after_edit = c.edits[-1].end + 2 * 16
    for fresh, want in (
        ("last", max(c.fresh_from, after_edit)),
        ("answer", max(c.answer_from, after_edit)),
        ("page", len(c.original)),
    ):
        runner = SimpleNamespace(args=SimpleNamespace(fresh=fresh, page_size=16))
        assert Runner.cached_from(runner, c) == want, fresh  # type: ignore[arg-type]


def test_fresh_from_after_an_assistant_turn_is_the_prompt() -> None:
    msgs = [
        *TWO_TURNS[:4],
        msg("assistant", "Reading it now. " * 20, thinking="The header is parsed in two places."),
        msg("assistant", ANSWER),
    ]
    c = make_case(R, "t#0@5:truncate", "truncate", msgs, 5, 4096)
    assert c is not None
    assert c.fresh_from == len(c.original) - len(R.prompt())


def test_no_case_edits_what_the_request_brings() -> None:
    # The only long tool output opens the run the request brings: none of
    # it was cached, so its truncation is no splice.
    msgs = [
        *TWO_TURNS[:4],
        msg("tool", "x" * 1000),
        msg("assistant", ANSWER),
    ]
    c = make_case(R, "t#0@5:truncate", "truncate", msgs, 5, 4096)
    assert c is None
    # Once an assistant turn follows it, it was cached: the same edit is a case.
    msgs.insert(4, msg("assistant", "cat more.py", tool_name="bash"))
    c = make_case(R, "t#0@6:truncate", "truncate", msgs, 6, 4096)
    assert c is not None and c.edits[-1].end <= c.fresh_from


def test_echo_is_what_the_host_marks() -> None:
    # host/splice/echo_test.go's TestRecomputeEcho, mirrored: the kept text
    # quotes the 10 tokens the edit removes; the quote, at 12..21 after the
    # splice, echoes them, and nothing else does.
    original = [*range(1000, 1010), *range(500, 510), 3000, 3001, *range(500, 510)]
    original += list(range(2000, 2020))
    edits = [Edit(10, 20, ())]
    c = Case("t", "truncate", original, apply_edits(original, edits), edits, [])
    lay = qualityarms.layout_of(c, 4, len(original))
    assert qualityarms.echo(c, lay) == list(range(12, 22))
    # A quote one token shorter than a run echoes nothing.
    short = [*original[:22], *range(500, 500 + qualityarms.ECHO_GRAM - 1), *range(2000, 2020)]
    c = Case("t", "truncate", short, apply_edits(short, edits), edits, [])
    assert qualityarms.echo(c, qualityarms.layout_of(c, 4, len(short))) == []


def test_held_out_set_leaves_out_the_tuned_cases(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # --set held-out: the cases of the larger per-session spread that the
    # default set does not hold.
    from kvbench import splicequality as sq

    def fake_build(tok: Any, traces: Any, *, budget: int, per_session: Any = None) -> list[Case]:
        names = ["a", "b"] if per_session is None else ["a", "c", "b", "d"]
        return [Case(n, "truncate", [], [], [], []) for n in names]

    monkeypatch.setattr(sq, "build_cases", fake_build)
    monkeypatch.setattr(sq, "check_case", lambda c: None)
    args = sq.parse_args(["--engine-socket", "e", "--control-socket", "c"])
    args.traces = str(tmp_path)
    assert [c.name for c in sq.select_cases(args, None)] == ["a", "b"]
    args.set = "held-out"
    assert [c.name for c in sq.select_cases(args, None)] == ["c", "d"]
