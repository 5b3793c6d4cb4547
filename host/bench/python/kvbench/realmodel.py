r"""The Python side of ``kvpilot bench real-model``.

Against an already running kvpilot host, one run measures wall-clock time
to first token of a transformers model on this CPU, four ways, on a ~4K
token prompt built from an agent trace (kvbench.traces). The model is
SmolLM2-135M-Instruct (kvpilot.smollm2), a trained model reading the trace
through its own tokenizer and chat template; ``--model`` picks one of the
random-weight models instead (their own hash tokenizer, kvbench.traces):

- ``full_prefill``: the model's own forward pass over the whole prompt, no
  cache (the baseline);
- ``kvpilot_prefix``: a fresh engine (new model object, new client, nothing
  in memory) whose prefix K/V comes from kvpilot: the previous turn was
  cached by another engine; only the new tail runs. Its fp32 logits are
  compared with the full prefill's, relative to their scale
  (``prefix_logit_rel_diff``, kvpilot.torchengine.logits says why), and
  its greedy token must be the same;
- ``reprefill_edit``: an early tool output is truncated; the edited prompt
  is re-prefilled from the edit point on, as an exact-prefix cache must
  (computed without committing, so the next arm starts from the same cache);
- ``kvpilot_splice``: the same edit as a Splice directive (amortize): only
  the stub τ is prefilled, through the fill order, then the next request's
  uncached suffix. Its time runs from the directive to the first token.
  The downstream layer-0 keys are then checked against the model's own
  (``splice_layer0_keys_ok``, kvpilot.torchengine.contract), and what the
  model says next is compared with the re-prefill's (``splice_vs_reprefill``:
  the greedy token and the KL divergence; reported, not a target: the
  kept tokens attended to the text the edit removed).

Usage::

    python -m kvbench.realmodel --engine-socket S --control-socket C \\
        --traces DIR [--tokens 4096] [--model smollm2]

It prints exactly one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

import torch

from kvbench.scenario import splice_session
from kvbench.traces import (
    ChatTokenizer,
    HashTokenizer,
    Tokenizer,
    find_traces_dir,
    trace_prompt,
    truncate_tool_output,
)
from kvpilot.control import ControlClient
from kvpilot.smollm2 import MODEL_NAME, model_dir
from kvpilot.torchengine import logits, models
from kvpilot.torchengine.contract import check_splice
from kvpilot.torchengine.engine import TorchEngine
from kvpilot.torchengine.fills import FillServer

log = logging.getLogger("kvbench.realmodel")

DEFAULT_TRACE = "spotter_258c7280-ae70-4798-800f-63464d01a85d.jsonl"
PREFIX_TARGET = 0.25
SPLICE_TARGET = 0.20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module doc)."""
    ap = argparse.ArgumentParser(
        prog="python -m kvbench.realmodel", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--engine-socket", required=True, help="the host's engine socket")
    ap.add_argument("--control-socket", required=True, help="the host's control socket")
    ap.add_argument(
        "--traces",
        default="",
        help="agent traces directory (default $KVPILOT_TRACES, else the repository's "
        "examples/traces)",
    )
    ap.add_argument("--trace", default=DEFAULT_TRACE, help="trace file in --traces")
    ap.add_argument("--session", type=int, default=0, help="session (line) of the trace file")
    ap.add_argument("--tokens", type=int, default=4096, help="prompt length in tokens")
    ap.add_argument(
        "--model",
        default=models.SMOLLM2,
        help=f"one of {', '.join(models.MODELS + tuple(models.ALIASES))}",
    )
    ap.add_argument("--size", default="bench", choices=models.SIZES, help="random models' size")
    ap.add_argument("--seed", type=int, default=0, help="random models' weights seed")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each repeatable arm (fastest)")
    ap.add_argument("--tenant", default="", help="tenant of every request and directive")
    ap.add_argument("--log-level", default="INFO")
    return ap.parse_args(argv)  # fmt: skip


def _fmt(runs: list[float]) -> str:
    return ", ".join(f"{r:.0f}" for r in runs)


def _rounded(runs: list[float]) -> list[float]:
    return [round(r, 2) for r in runs]


def _warm(e: TorchEngine, tm: models.TinyModel) -> None:
    # One short pass through each code path, so first-call costs (kernel
    # selection, allocations) are not in any arm.
    toks = list(range(100, 100 + 3 * e.page_size))
    with torch.no_grad():
        tm.model(torch.tensor([toks]))
    e.prefill(toks, tenant="warm-up", commit=False)


def tokenizer(tm: models.TinyModel) -> Tokenizer:
    """The trained model's own tokenizer, or the hash tokenizer of a random one."""
    if tm.name == models.SMOLLM2:
        return ChatTokenizer.load(model_dir(), MODEL_NAME)
    return HashTokenizer(tm.vocab_size)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the four arms and the checks; returns the report."""
    traces = find_traces_dir(args.traces)
    if traces is None:
        raise SystemExit("bench: pass --traces DIR (the agent traces), or set KVPILOT_TRACES")
    if args.threads:
        torch.set_num_threads(args.threads)
    name = models.canonical_name(args.model)
    tm = models.build(name, size=args.size, seed=args.seed)
    tok = tokenizer(tm)
    prompt = trace_prompt(traces / args.trace, tok, args.tokens, args.session)
    toks = prompt.tokens
    closing = prompt.messages[-1].span[0]  # the previous turn ends here
    edit = truncate_tool_output(prompt, tok, after=args.page_size * 8)
    edited = toks[: edit.start] + edit.replacement + toks[edit.end :]
    tenant, ps = args.tenant, args.page_size
    log.info(
        "prompt: %d tokens from %s; edit: message %d, tokens [%d, %d) -> %d (%d chars cut)",
        len(toks),
        prompt.source,
        edit.message,
        edit.start,
        edit.end,
        len(edit.replacement),
        edit.chars,
    )

    # The previous turn, cached by an engine that then goes away.
    with TorchEngine(tm, args.engine_socket, page_size=ps, engine_id="bench-seed") as seed:
        _warm(seed, tm)
        t0 = time.perf_counter()
        seed.prefill(toks[:closing], session="bench", tenant=tenant)
        log.info(
            "seeded the previous turn (%d tokens) in %.0f ms",
            closing,
            (time.perf_counter() - t0) * 1e3,
        )

    # full_prefill: the model's own forward, no cache.
    full_runs = []
    with torch.no_grad():
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            full_logits = tm.model(torch.tensor([toks])).logits[0, -1].float()
            full_runs.append((time.perf_counter() - t0) * 1e3)
    full_ms = min(full_runs)
    log.info("full_prefill: %.0f ms (runs %s)", full_ms, _fmt(full_runs))

    # kvpilot_prefix: each run a fresh engine (a new model object, a new
    # client, nothing in memory); all but the last leave the cache as it
    # was, the last is the session's next turn.
    fresh = models.build(name, size=args.size, seed=args.seed)
    pre_runs: list[float] = []
    agree: logits.LogitAgreement | None = None
    for r in range(args.repeat):
        last = r == args.repeat - 1
        if r:
            fresh = models.build(name, size=args.size, seed=args.seed)
        with TorchEngine(fresh, args.engine_socket, page_size=ps, engine_id=f"bench-{r}") as e:
            _warm(e, fresh)
            pre = e.prefill(toks, session="bench" if last else "", tenant=tenant, commit=last)
        pre_runs.append(pre.ttft_ms)
        a = logits.compare(pre.logits, full_logits)
        agree = a if agree is None else agree.worst(a)
        log.info(
            "kvpilot_prefix: %.1f ms (match %.1f ms, %d pages loaded back), %d cached, "
            "max |logit diff| %.2e (%.2e of the logits' scale), same top-1 %s",
            pre.ttft_ms,
            pre.match_ms,
            pre.loaded_pages,
            pre.cached_tokens,
            a.max_abs,
            a.rel,
            a.top1,
        )
    assert agree is not None
    pre_ms = min(pre_runs)

    with (
        TorchEngine(fresh, args.engine_socket, page_size=ps, engine_id="bench") as e,
        ControlClient(args.control_socket, source="bench-real-model") as cc,
    ):
        fills = FillServer(e).start()
        _warm(e, fresh)
        re_runs = []
        for _ in range(args.repeat):
            re = e.prefill(edited, tenant=tenant, commit=False)
            re_runs.append(re.ttft_ms)
        re_ms = min(re_runs)
        log.info(
            "reprefill_edit: %.0f ms (runs %s), %d prefilled",
            re_ms,
            _fmt(re_runs),
            re.prefilled_tokens,
        )

        # The rows around the splice are read before the directive and
        # right after the branch is committed (before the next request
        # adds rows of its own); reading is not in the time.
        filled = fills.tokens
        out = splice_session(
            e, fills, cc, session="bench", tokens=toks, start=edit.start, end=edit.end,
            replacement=edit.replacement, tenant=tenant,
        )  # fmt: skip
        nxt = e.prefill(edited, session="bench", tenant=tenant)
        answer = logits.compare(nxt.logits, re.logits)
        splice_ms = out.apply_ms + out.fill_ms + out.commit_ms + nxt.ttft_ms
        # The host fills only what differs: a stub that keeps the output's
        # head leaves the pages that head fills as they were.
        fill_tokens = fills.tokens - filled
        splice_prefill = fill_tokens + nxt.prefilled_tokens
        log.info(
            "kvpilot_splice: %.1f ms (apply %.1f, fill %.1f, commit %.1f, request %.1f), "
            "%d prefilled",
            splice_ms,
            out.apply_ms,
            out.fill_ms,
            out.commit_ms,
            nxt.ttft_ms,
            splice_prefill,
        )
        chk = check_splice(
            fresh,
            e.layout,
            e.rope,
            before=out.before,
            after=out.after,
            edited=edited,
            start=edit.start,
            end=edit.end,
            replacement=edit.replacement,
            angle_rounding=True,
            first_layer_only=True,
        )
        log.info(
            "splice check: ok=%s, %d downstream rows, rel L2 %.2e (allowance %.2e), "
            "rotation %.2f of tolerance%s",
            chk.ok,
            chk.downstream_rows,
            chk.max_rel_model,
            chk.max_angle_allowance,
            chk.max_rotation_err,
            f"; {chk.failures[:3]}" if chk.failures else "",
        )
        log.info("splice vs re-prefill: same greedy token %s, KL %.2e", answer.top1, answer.kl)

    prefix_ratio = pre_ms / full_ms
    splice_share = splice_prefill / max(re.prefilled_tokens, 1)
    met = prefix_ratio <= PREFIX_TARGET and splice_share <= SPLICE_TARGET and agree.ok and chk.ok
    c = tm.config
    trained = name == models.SMOLLM2
    return {
        "scenario": "real-model",
        "params": {
            "model": MODEL_NAME if trained else name,
            "weights": "trained (kvpilot.smollm2, bf16 checkpoint computed in fp32)"
            if trained
            else f"random, size {args.size}, seed {args.seed}",
            "architecture": type(tm.model).__name__,
            "hidden": int(c.hidden_size),
            "layers": int(c.num_hidden_layers),
            "parameters": sum(p.numel() for p in tm.model.parameters()),
            "dtype": "fp32",
            "rope": str(e.rope),
            "page_size": ps,
            "tokens": len(toks),
            "tokenizer": tok.description,
            "trace": prompt.source,
            "system_block": "a fixed system block of the benchmark's own (the traces carry none)",
            "edit": {
                "message": edit.message,
                "span": [edit.start, edit.end],
                "replacement_tokens": len(edit.replacement),
                "chars_cut": edit.chars,
            },
            "torch_threads": torch.get_num_threads(),
            # Noise from other work on the machine only adds time, and hurts
            # short passes most (every small op waits for both threads), so
            # a repeated arm reports its fastest run.
            "clock": f"wall, this CPU; fastest of {args.repeat} runs (kvpilot_splice: one)",
        },
        "arms": {
            "full_prefill": {
                "ttft_ms": round(full_ms, 2),
                "prompt_tokens": len(toks),
                "prefill_tokens": len(toks),
                "runs_ms": _rounded(full_runs),
            },
            "kvpilot_prefix": {
                "ttft_ms": round(pre_ms, 2),
                "runs_ms": _rounded(pre_runs),
                "cached_tokens": pre.cached_tokens,
                "prompt_tokens": len(toks),
                "prefill_tokens": pre.prefilled_tokens,
            },
            "reprefill_edit": {
                "ttft_ms": round(re_ms, 2),
                "runs_ms": _rounded(re_runs),
                "prefill_tokens": re.prefilled_tokens,
                "prompt_tokens": len(edited),
                "cached_tokens": re.cached_tokens,
            },
            "kvpilot_splice": {
                "ttft_ms": round(splice_ms, 2),
                "prefill_tokens": splice_prefill,
                "prompt_tokens": len(edited),
                "fill_tokens": fill_tokens,
                "suffix_tokens": nxt.prefilled_tokens,
                "cached_tokens": nxt.cached_tokens,
                "apply_ms": round(out.apply_ms, 2),
                "fill_ms": round(out.fill_ms, 2),
                "commit_ms": round(out.commit_ms, 2),
                "request_ttft_ms": round(nxt.ttft_ms, 2),
            },
        },
        "checks": {
            "prefix_max_abs_logit_diff": agree.max_abs,
            "prefix_logit_scale": agree.scale,
            "prefix_logit_rel_diff": agree.rel,
            "prefix_top1_equal": agree.top1,
            "prefix_kl": agree.kl,
            "splice_layer0_keys_ok": chk.ok,
            "splice_downstream_rows": chk.downstream_rows,
            "splice_max_rel_l2_vs_model": chk.max_rel_model,
            "splice_angle_rounding_allowance": chk.max_angle_allowance,
            "splice_max_rotation_err_of_tol": chk.max_rotation_err,
            "splice_moved_bits_equal": chk.moved_bits_equal,
            "cached_before_after": [out.cached_before, out.cached_after],
            # Reported, not a target: what the amortized splice costs the
            # model's next token against a re-prefill of the edited prompt.
            "splice_vs_reprefill": {
                "top1_equal": answer.top1,
                "kl": answer.kl,
                "max_abs_logit_diff": answer.max_abs,
            },
        },
        "ratios": {
            "prefix_ttft_vs_full": round(prefix_ratio, 4),
            "splice_prefill_share": round(splice_share, 4),
        },
        "targets": {
            "prefix_ttft_ratio_max": PREFIX_TARGET,
            "splice_prefill_share_max": SPLICE_TARGET,
            "logit_rel_diff_max": logits.REL_TOL,
            "prefix_top1_equal": True,
            "met": met,
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints its JSON report on stdout."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    report = run(args)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
