"""Reasoning dropped from an SGLang conversation as a splice, not a recompute.

Reasoning models' chat templates send the next turn's history without the
last answer's reasoning, so the prompt leaves the cached sequence at the
reasoning and SGLang's own tree (which caches the output unless
``--strip-thinking-cache`` keeps it out, SGLang 0.5.23's
arg_groups/fields/serving.py) hits the prompt only: the answer is
recomputed. kvpilot splices the reasoning span out of the conversation it
holds for SGLang: the pages after it move up, their keys re-rotated, and
are committed under the edited sequence's block hashes, which is what
SGLang's next lookup (a Match of the edited tokens) asks for. So the next
turn's prefetch brings the answer's pages back from kvpilot instead of
recomputing them.

A splice edits a session's sequence; SGLang's storage calls carry no
session. Whoever knows the conversation (the router or front door that
sends SGLang its turns) names it once with a Match of the turn's tokens
under the session on the engine socket, which records the session's
sequence from the pages the SGLang worker wrote (nothing is copied), and
then sends the Splice directive on the Control socket.

The SGLang workers are SGLang's own cache and controller in this process
(tests/sglang_worker.py's Worker). Run by ``make test-sglang``;
skipped without SGLang.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here: make test-sglang runs this")

import sglang_worker
import torch

from kvpilot import ControlClient, EngineClient, Layout
from kvpilot import directives as d
from kvpilot.layout import RopeConfig
from kvpilot.torchengine.contract import rotate_exact

PAGE = 16
MODEL = "sglang-splice-test"
LAYERS, HEADS, DIM = 2, 2, 8
THETA = 10000.0
GEOMETRY = {"page_size": PAGE, "layers": LAYERS, "heads": HEADS, "head_dim": DIM, "kv_size": 512}
# The layout and RoPE the SGLang workers register with "rope_theta" set
# (kvpilot.sglang.pages: the whole key head rotated, NeoX pairing).
LAYOUT = Layout.mha(
    MODEL, page_size=PAGE, dtype="bf16", layers=LAYERS, kv_heads=HEADS, head_dim=DIM
)
SESSION = "sglang-conv"


def _staged(c: EngineClient, tokens: list[int]) -> tuple[int, torch.Tensor]:
    """The pages the host holds for ``tokens`` (its own bytes, from the
    staging arena): cached tokens and ``[layers, 2, tokens, heads, dim]``.
    """
    m = c.match(tokens)
    try:
        slots = torch.tensor(m.page_slots, dtype=torch.long)
        kv = torch.stack(
            [
                torch.stack(
                    [c.device.tensor(layer, buf).index_select(0, slots).clone() for buf in (0, 1)]
                )
                for layer in range(LAYERS)
            ]
        )
    finally:
        c.release(m.request_id)
    return m.cached_tokens, kv.reshape(LAYERS, 2, -1, HEADS, DIM)


def test_stripped_thinking_is_spliced_and_prefetched(kvpilot_host: Any) -> None:
    """A turn with a reasoning span (prompt 2 pages, reasoning 2, answer 2)
    is written by one SGLang worker. The next turn, thinking stripped
    (prompt, answer, new user page), hits 2 of its 5 pages in kvpilot: the
    answer's pages sit after the reasoning. After the splice it hits 4: a
    fresh SGLang worker prefetches the answer's pages from kvpilot, byte
    for byte as the host's splice made them: V unchanged, K re-rotated by
    minus the reasoning's length."""
    spec = {
        "socket": kvpilot_host.engine_socket,
        **GEOMETRY,
        "extra": {"model": MODEL, "rope_theta": THETA},
    }
    prompt = list(range(1000, 1000 + 2 * PAGE))
    reasoning = list(range(3000, 3000 + 2 * PAGE))
    answer = list(range(5000, 5000 + 2 * PAGE))
    user = list(range(7000, 7000 + PAGE))
    turn = {"name": "turn", "tokens": prompt + reasoning + answer}
    stripped = {"name": "next", "tokens": prompt + answer + user}

    with sglang_worker.Worker(spec) as producer:
        producer.produce(turn)
    with sglang_worker.Worker(spec) as before:
        got = before.loaded(stripped)
    assert got is not None and got.shape[2] == 2 * PAGE, "only the prompt's pages, unspliced"

    with (
        EngineClient(
            kvpilot_host.engine_socket,
            LAYOUT,
            RopeConfig(base=THETA),
            engine_id="front-door",
            mode="connector",
        ) as door,
        ControlClient(kvpilot_host.control_socket) as ctl,
    ):
        # The front door names the conversation: the turn's pages, as the
        # SGLang worker wrote them, become the session's sequence.
        m = door.match(turn["tokens"], session=SESSION)
        try:
            assert m.cached_tokens == 6 * PAGE
            door.commit(m.request_id, turn["tokens"], m.page_slots)
        finally:
            door.release(m.request_id)
        r = ctl.apply([d.splice(SESSION, len(prompt), len(prompt) + len(reasoning))])
        assert r.ok and r.results[0].verb == "Splice", r
        cached, host_kv = _staged(door, stripped["tokens"])
    assert cached == 4 * PAGE

    with sglang_worker.Worker({**spec, "layout": "layer_first"}) as after:
        got = after.loaded(stripped)
    assert got is not None and got.shape[2] == 4 * PAGE, "the answer's pages come from the splice"
    # What SGLang loaded is what the host's splice produced, byte for byte.
    assert torch.equal(got.view(torch.int16), host_kv.view(torch.int16))

    orig = sglang_worker.expected_kv(turn["tokens"], [None, None], LAYERS, HEADS, DIM, PAGE)
    kept = slice(0, len(prompt))
    moved = slice(len(prompt) + len(reasoning), len(turn["tokens"]))
    tail = slice(len(prompt), 4 * PAGE)
    assert torch.equal(got[:, :, kept].view(torch.int16), orig[:, :, kept].view(torch.int16))
    assert torch.equal(got[:, 1, tail].view(torch.int16), orig[:, 1, moved].view(torch.int16))
    # The answer's keys turned by -len(reasoning) positions (kvpilot's
    # rule, in float64, then rounded to the cache's bf16).
    inv_freq = 1.0 / THETA ** (torch.arange(0, DIM, 2, dtype=torch.float64) / DIM)
    want_k = rotate_exact(orig[:, 0, moved], -len(reasoning), inv_freq, "half_split")
    err = (got[:, 0, tail].double() - want_k).abs()
    assert not torch.equal(got[:, 0, tail], orig[:, 0, moved])
    assert float(err.max()) <= 2**-7 * float(want_k.abs().max()), float(err.max())
