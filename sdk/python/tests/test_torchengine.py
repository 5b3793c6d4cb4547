"""kvpilot.torchengine against transformers' own forward pass.

The paged forward (no host) and a TorchEngine on a real ``kvpilot serve``:
prefix reuse by a fresh engine (in process and in a separate process) gives
last-position logits that are ``model(input_ids).logits`` to fp32 round-off
(within 1e-5 of their scale, kvpilot.torchengine.logits says why) and the
same greedy tokens; a fully cached prompt; a host restart in the middle.
SmolLM2-135M-Instruct, the trained model, beside the random-weight models
whose RoPE variants it lacks (llama3 scaling, YaRN, linear, MLA).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here: pip install 'kvpilot[torch]', or make py-env"
)
pytest.importorskip(
    "transformers",
    reason="transformers is not installed here: pip install 'kvpilot[torch]', or make py-env",
)

from kvbench.scenario import host_config  # noqa: E402
from kvpilot.torchengine import logits, models  # noqa: E402
from kvpilot.torchengine.contract import layer0_rows  # noqa: E402
from kvpilot.torchengine.engine import TorchEngine  # noqa: E402
from kvpilot.torchengine.forward import PagedModel  # noqa: E402
from kvpilot.torchengine.paging import LocalArena, Rows, gather, gather_before  # noqa: E402
from kvpilot.torchengine.rope import from_storage, rope_config, to_storage  # noqa: E402

# (model, MLA pairing) for every family.
CASES = [
    ("llama3", "half_split"),
    ("qwen2-yarn", "half_split"),
    ("llama-linear", "half_split"),
    ("deepseek-v3", "half_split"),
    ("deepseek-v3", "interleaved"),
    ("smollm2", "half_split"),
]
IDS = [f"{m}-{p}" if m == "deepseek-v3" else m for m, p in CASES]
PS = 16


def assert_same_logits(got: torch.Tensor, want: torch.Tensor) -> None:
    """The same logits to fp32 round-off, and the same greedy token."""
    a = logits.compare(got, want)
    assert a.ok, a


def prompt(tm: models.TinyModel, n: int, seed: int = 3) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, tm.vocab_size, (n,), generator=g).tolist()


@torch.no_grad()
def reference(tm: models.TinyModel, toks: list[int], steps: int) -> tuple[torch.Tensor, list[int]]:
    """transformers' own last-position logits and greedy continuation."""
    logits = tm.model(torch.tensor([toks])).logits[0, -1].float()
    seq, out = list(toks), []
    nxt = logits
    for _ in range(steps):
        t = int(nxt.argmax())
        out.append(t)
        seq.append(t)
        nxt = tm.model(torch.tensor([seq])).logits[0, -1]
    return logits, out


@pytest.mark.parametrize(("name", "pairing"), CASES, ids=IDS)
def test_paged_forward_matches_transformers(name: str, pairing: str) -> None:
    tm = models.build(name, mla_pairing=pairing)
    pm = PagedModel(tm, chunk=48)  # several chunks per run
    arena = LocalArena(tm.layout(PS), 32)
    toks = prompt(tm, 230)
    want, _ = reference(tm, toks, 0)
    slots = [31 - k for k in range(15)]  # out of order on purpose
    cut = 101
    pm.forward(toks[:cut], 0, arena, Rows.empty(), Rows.span(slots, PS, 0, cut), logits=False)
    got = pm.forward(
        toks[cut:], cut, arena, Rows.span(slots, PS, 0, cut), Rows.span(slots, PS, cut, 230 - cut)
    )
    assert got is not None
    assert_same_logits(got, want)
    # The rows it wrote are transformers' own cache rows, and a forward pass
    # through layer 0 alone gives the same ones.
    own = layer0_rows(tm, toks)
    short = layer0_rows(tm, toks, first_layer_only=True)
    rows = Rows.span(slots, PS, 0, 230)
    for b, t in enumerate(own):
        assert torch.equal(short[b], t)
        stored = arena.tensor(0, b)[rows.slot, rows.row]
        assert float((stored - t).abs().max()) <= 1e-5 * float(t.abs().max())


def test_logits_from_skips_only_the_vocabulary_projection() -> None:
    """``every`` logits from the k-th token on are the rows from k of every
    token's, wherever k falls among the chunks; a k with no token is refused.
    """
    tm = models.build("llama3")
    pm = PagedModel(tm, chunk=48)
    arena = LocalArena(tm.layout(PS), 16)
    toks = prompt(tm, 130)
    slots = list(range(16))
    ctx = Rows.span(slots, PS, 0, 60)
    pm.forward(toks[:60], 0, arena, Rows.empty(), ctx, logits=False)
    dest = Rows.span(slots, PS, 60, 70)
    every = pm.forward(toks[60:], 60, arena, ctx, dest, every=True)
    assert every is not None and every.shape[0] == 70
    for k in (0, 30, 47, 48, 55, 69):
        part = pm.forward(toks[60:], 60, arena, ctx, dest, every=True, logits_from=k)
        assert part is not None and part.shape[0] == 70 - k
        assert float((part - every[k:]).abs().max()) <= 1e-5 * float(every.abs().max())
    for k in (-1, 70):
        with pytest.raises(ValueError, match="logits from token"):
            pm.forward(toks[60:], 60, arena, ctx, dest, every=True, logits_from=k)


class _PagesApart:
    """An arena whose pages are not one run of rows (as a page-major
    arena's per-buffer view): each page is followed by a spare row.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        slots, ps, heads, dim = shape
        self.t = torch.randn(slots, ps + 1, heads, dim)

    def tensor(self, layer: int, buf: int) -> torch.Tensor:
        return self.t[:, :PS]


@pytest.mark.parametrize("arena", ["flat", "pages_apart", "bf16"])
def test_gather_before_is_the_rows_then_the_tail(arena: str) -> None:
    """One copy into one tensor, bit for bit what indexing the rows and
    concatenating the tail (in the tail's dtype) gives.
    """
    shape = (6, PS, 2, 8)
    src: LocalArena | _PagesApart
    if arena == "pages_apart":
        src = _PagesApart(shape)
    else:
        dtype = "bf16" if arena == "bf16" else "fp32"
        tm = models.build("llama3")
        src = LocalArena(replace(tm.layout(PS), dtype=dtype), 6)
        for b in range(2):
            src.tensor(0, b).copy_(torch.randn(src.tensor(0, b).shape))
    heads, dim = src.tensor(0, 0).shape[2:]
    rows = Rows.span([4, 1, 5, 0], PS, 3, 50)
    tails = (torch.randn(7, heads, dim), torch.randn(7, heads, dim))
    got = gather_before(src, 0, rows, tails)
    for b, tail in enumerate(tails):
        t = src.tensor(0, b)
        want = torch.cat((t[rows.slot, rows.row].to(tail.dtype), tail))
        assert got[b].dtype == tail.dtype and torch.equal(got[b], want)
        assert torch.equal(gather(src, 0, 2, rows)[b], t[rows.slot, rows.row])


@pytest.mark.parametrize("interleave", [True, False], ids=["rope_interleave", "plain"])
def test_mla_pairing_facts(interleave: bool) -> None:
    """transformers' DeepSeek-V3 caches k_pe half-split whatever its
    rope_interleave flag. With the flag (the default) the projection's k_pe
    is interleaved and apply_rotary_pos_emb_interleave rotates pairs
    (2i, 2i+1) but writes them de-interleaved: the interleaved storage form
    of what it caches is the GPT-J rotation of the projection (DeepSeek-V2,
    vLLM). Without it, rotate_half rotates (i, i + d/2) as stored.
    """
    tm = models.build("deepseek-v3", rope_interleave=interleave)
    attn = tm.model.model.layers[0].self_attn
    toks = prompt(tm, 40)
    with torch.no_grad():
        x = tm.model.model.layers[0].input_layernorm(
            tm.model.model.embed_tokens(torch.tensor([toks]))
        )
        raw = attn.kv_a_proj_with_mqa(x)[..., attn.kv_lora_rank :][0]  # [N, d]
        cos, sin = tm.model.model.rotary_emb(x, torch.arange(40)[None])
        half = raw.shape[-1] // 2
        c, s = cos[0, :, :half], sin[0, :, :half]
        cached = tm.model(torch.tensor([toks]), use_cache=True).past_key_values.layers[0]
        cached = cached.values[0, 0]
    if interleave:
        gptj = torch.empty_like(raw)
        gptj[:, 0::2] = raw[:, 0::2] * c - raw[:, 1::2] * s
        gptj[:, 1::2] = raw[:, 1::2] * c + raw[:, 0::2] * s
        assert torch.allclose(cached, from_storage(gptj, "interleaved"), atol=1e-6)
        assert torch.allclose(to_storage(cached, "interleaved"), gptj, atol=1e-6)
    else:
        a, b = raw[:, :half], raw[:, half:]
        neox = torch.cat((a * c - b * s, b * c + a * s), dim=-1)
        assert torch.allclose(cached, neox, atol=1e-6)
    assert torch.equal(from_storage(to_storage(cached, "interleaved"), "interleaved"), cached)


def test_rope_config_from_hf() -> None:
    got = {n: rope_config(models.build(n).config) for n, _ in CASES[:4]}
    assert got["llama3"].scaling.type == "llama3" and got["llama3"].scaling.high_freq_factor == 4.0
    assert (
        got["qwen2-yarn"].scaling.type == "yarn"
        and got["qwen2-yarn"].scaling.original_max_position == 1024
    )
    assert (
        got["llama-linear"].scaling.type == "linear" and got["llama-linear"].scaling.factor == 2.0
    )
    ds = got["deepseek-v3"].scaling
    assert (ds.type, ds.mscale, ds.mscale_all_dim) == ("yarn", 1.0, 0.8)
    assert all(r.base == 10000.0 for r in got.values())


def engine_host(factory):  # type: ignore[no-untyped-def]
    return factory(**host_config(PS, 256))


@pytest.mark.parametrize(("name", "pairing"), CASES, ids=IDS)
def test_prefix_reuse_fresh_engine(kvpilot_host_factory, name: str, pairing: str) -> None:
    h = engine_host(kvpilot_host_factory)
    toks = prompt(models.build(name, mla_pairing=pairing), 300)
    # A first engine caches a prefix, then goes away.
    with TorchEngine(models.build(name, mla_pairing=pairing), h.engine_socket) as first:
        r = first.prefill(toks[:250], session="s")
        assert r.cached_tokens == 0 and r.committed_pages == 250 // PS
    # A fresh model object and engine: only kvpilot holds the prefix.
    tm = models.build(name, mla_pairing=pairing)
    want, want_gen = reference(tm, toks, 4)
    with TorchEngine(tm, h.engine_socket) as e:
        r = e.prefill(toks, session="s", generate=4)
    assert r.cached_tokens == 240 and r.prefilled_tokens == 60
    assert_same_logits(r.logits, want)
    assert r.generated == want_gen


def test_prefix_reuse_fresh_process(kvpilot_host_factory, tmp_path: Path) -> None:
    """The engine that reuses the prefix is another process, and the
    trained model's greedy continuation is the one it gives without kvpilot."""
    h = engine_host(kvpilot_host_factory)
    tm = models.build("smollm2")
    toks = prompt(tm, 300)
    with TorchEngine(tm, h.engine_socket) as first:
        first.prefill(toks[:250], session="s")
    out = tmp_path / "result.json"
    code = f"""
import json, torch
from kvpilot.torchengine import models
from kvpilot.torchengine.engine import TorchEngine
with TorchEngine(models.build("smollm2"), {h.engine_socket!r}) as e:
    r = e.prefill({toks!r}, session="s", generate=4)
json.dump({{"cached": r.cached_tokens, "logits": r.logits.tolist(), "gen": r.generated}},
          open({str(out)!r}, "w"))
"""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(out.read_text())
    want, want_gen = reference(tm, toks, 4)
    assert got["cached"] == 240
    assert_same_logits(torch.tensor(got["logits"]), want)
    assert got["gen"] == want_gen


def test_fully_cached_prompt(kvpilot_host_factory) -> None:
    """A prompt of whole pages, all cached: its last token is recomputed."""
    h = engine_host(kvpilot_host_factory)
    tm = models.build("qwen2-yarn")
    toks = prompt(tm, 8 * PS)
    want, _ = reference(tm, toks, 0)
    with TorchEngine(tm, h.engine_socket) as e:
        e.prefill(toks)
        r = e.prefill(toks)
    assert r.cached_tokens == len(toks) and r.prefilled_tokens == 1
    assert_same_logits(r.logits, want)


def test_host_restart(kvpilot_host_factory) -> None:
    """The host restarts in the middle of a request (after its match, before
    its commit): run_request runs it again on a new registration, and the
    logits are still the model's.
    """
    h = engine_host(kvpilot_host_factory)
    tm = models.build("llama3")
    toks = prompt(tm, 200)
    want, _ = reference(tm, toks, 0)
    with TorchEngine(tm, h.engine_socket) as e:
        gen = e.client.registration.generation
        e.prefill(toks[:150], session="s")
        forward = e.paged.forward
        restarted = []

        def restart_once(*args, **kwargs):  # type: ignore[no-untyped-def]
            if not restarted:
                restarted.append(True)
                h.restart()
            return forward(*args, **kwargs)

        e.paged.forward = restart_once  # type: ignore[method-assign]
        r = e.prefill(toks, session="s")
        assert restarted and r.retried
        assert e.client.registration.generation > gen
        assert_same_logits(r.logits, want)
        r2 = e.prefill(toks, session="s")
        assert r2.cached_tokens == 192
        assert_same_logits(r2.logits, want)
