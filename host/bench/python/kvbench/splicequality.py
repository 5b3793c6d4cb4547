r"""The Python side of ``kvpilot bench splice-quality``: what a splice costs
the model's answers, and what recompute and the quality guard buy back.

Against an already running kvpilot host whose splice defaults are off
(``splice.max_kl: 0``, ``splice.recompute.first: 0``: each arm says what it
recomputes, and the host's defaults would run the guard on the plain splice
too; ``kvpilot bench splice-quality`` starts one so), on SmolLM2-135M-Instruct in fp32
(kvpilot.smollm2, the trained model from PyPI), for every case of
kvbench.editcases (a real edit of a real agent session: a truncated tool
output, stripped reasoning, cleared tool uses), the next assistant turn of
the session is scored by teacher forcing against a re-prefill of the edited
context (kvbench.qualityscore).

What is cached. Through the front door an edit arrives with a new request:
the previous turn left the context in the cache up to the request's new
messages (``Case.fresh_from``: the tool results and user messages after
the last assistant turn; an engine that commits its answers, as the torch
engine does, cached that turn too), and those are prefilled fresh after
the splice, attending to whatever the splice left. ``--fresh last`` (the default)
caches the original context up to them; ``--fresh answer`` up to the
previous turn's answer (``Case.answer_from``), as an engine that saves
prompts only (the vLLM connector) left it, and leaves out the cases whose
edit is in that answer (nothing cached follows it); ``--fresh page``
caches all of it but the last partial page (the stale rows of the
request's last messages then count against every arm). The edited region, which every share is
of, is the cached text from the first edit on: what the edit makes stale.
What follows it every arm prefills, the reference too.

Arms, and which path each takes. The product's arms go through the host as
a deployment does: the torchengine registered in arena mode with recompute
(kvpilot.torchengine), a Splice directive on the Control socket, the host's
plan, copy-on-write and RoPE re-rotation with kvpilot's kernels, the fill
orders the engine serves (kvpilot.torchengine.staleness), and the rows read
back from the host's arena. The reference and the methods kvpilot does not
ship are measurements, computed in torch by the engine's own passes on the
rows the host cached (kvbench.qualityarms):

- ``control`` (host): the splice with every kept token recomputed (the
  guard's fallback, a re-prefill of the tail): the cache is built in two
  chunks, the original prefill's rows before the edit and one recompute
  pass after it. It must equal the reference exactly: KL 0 shows the
  host's path adds no error of its own, so every other arm's figure is the
  edit's.
- ``reprefill`` (torch): the reference.
- ``splice`` (host): amortize, nothing recomputed; its layer-0 keys are
  checked against the model's own at their new positions.
- ``splice_gap`` (torch): the same splice without re-rotation.
- ``recompute_first_<k>`` (host): ``recompute: {first: k}``.
- ``recompute_deviation_<r>`` (torch): CacheBlend's selection, the top r of
  the edited region by layer-1 key deviation.
- ``guard`` (host): ``recompute: {max_kl: B}`` at the default budget
  (kvpilot.torchengine.staleness.DEFAULT_MAX_KL).
- ``no_edit`` (torch): the original context, unedited.

The curves (``curves`` and ``--plot``): mean KL against the share of the
edited region recomputed, per method. The guard's run is traced once per
case in torch (the trajectory: the cache after each block it recomputes,
scored), which gives the first-k curve at every block and the guard at
any budget (it stops at the first block whose estimate meets it), and
``first_best``, the bound on any stopping rule on that path; the host arms
check it (the host's guard and first-k arms land on the same figures).

The original prefill of each case is computed once, through the host, and
shared by every arm; the plain splice's rows, read back once, are the base
of every torch arm that edits.

Usage::

    python -m kvbench.splicequality --engine-socket S --control-socket C \
        [--traces DIR] [--cases N] [--case NAME ...] [--context-tokens 2560] \
        [--fresh last|answer|page] [--set default|held-out]

It prints exactly one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from kvbench import qualityarms as arms
from kvbench import qualityreport
from kvbench.editcases import HELD_OUT_PER_SESSION, Case, build_cases, check_case
from kvbench.localcache import LocalCache, continuation_logits, log_probs, read_cached_layers
from kvbench.qualityscore import Score, score
from kvbench.traces import find_traces_dir
from kvpilot import directives
from kvpilot.control import ControlClient
from kvpilot.smollm2 import model_dir
from kvpilot.torchengine import models
from kvpilot.torchengine.contract import check_splice
from kvpilot.torchengine.engine import TorchEngine
from kvpilot.torchengine.fills import FillServer
from kvpilot.torchengine.staleness import DEFAULT_MAX_KL

log = logging.getLogger("kvbench.splicequality")

FIRST_K = (16, 64, 256)
DEVIATION_SHARES = (0.05, 0.15, 0.30)
#: What of each case's context was cached before the splice (--fresh):
#: ``last``, all but the request's new messages (Case.fresh_from), what the
#: previous turn left in the cache of an engine that commits its answers;
#: ``answer``, all but the previous turn's answer and the new messages
#: (Case.answer_from), what an engine that saves prompts only (the vLLM
#: connector) left; ``page``, all but the last partial page.
FRESH = ("last", "answer", "page")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module doc)."""
    ap = argparse.ArgumentParser(
        prog="python -m kvbench.splicequality", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--engine-socket", required=True, help="the host's engine socket")
    ap.add_argument("--control-socket", required=True, help="the host's control socket")
    ap.add_argument(
        "--traces",
        default="",
        help="agent traces (default $KVPILOT_TRACES, else the repository's examples/traces)",
    )
    ap.add_argument("--cases", type=int, default=0, help="run the first N cases (0: all)")
    ap.add_argument("--case", action="append", default=[], help="run this case (repeatable)")
    ap.add_argument("--context-tokens", type=int, default=2560, help="longest context")
    ap.add_argument(
        "--fresh",
        choices=FRESH,
        default="last",
        help="what the request brings that the cache lacks: its new messages (as through the "
        "front door to an engine that caches its answers), the previous answer and those (an "
        "engine that saves prompts only, as the vLLM connector), or only the last partial page",
    )
    ap.add_argument(
        "--set",
        choices=("default", "held-out"),
        default="default",
        help="which cases: the benchmark's own (its figures and the guard's constants come "
        "from them), or other turns of the same sessions that none of that was tuned on",
    )
    ap.add_argument("--max-kl", type=float, default=DEFAULT_MAX_KL, help="the guard's budget")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument(
        "--kv-dtype",
        default="",
        choices=("", "fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"),
        help="the KV pages' dtype (default: the model's, fp32): the engine stores its keys and "
        "values in it, the host's kernels rotate them in it, and the reference re-prefills "
        "into a cache of it",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--tenant", default="", help="tenant of every request and directive")
    ap.add_argument("--log-level", default="INFO")
    return ap.parse_args(argv)


def select_cases(args: argparse.Namespace, tok: Any) -> list[Case]:
    """The cases to run: ``--case`` names, else the first ``--cases``."""
    traces = find_traces_dir(args.traces)
    if traces is None:
        raise SystemExit("bench: pass --traces DIR (the agent traces), or set KVPILOT_TRACES")
    cases = build_cases(tok, Path(traces), budget=args.context_tokens)
    if args.set == "held-out":
        tuned = {c.name for c in cases}
        more = build_cases(
            tok, Path(traces), budget=args.context_tokens, per_session=HELD_OUT_PER_SESSION
        )
        cases = [c for c in more if c.name not in tuned]
    for c in cases:
        check_case(c)
    if args.fresh == "answer":
        # An edit inside the previous answer leaves nothing cached after it
        # to splice: the front door prefills from the edit on.
        kept = [c for c in cases if c.edits[-1].end <= c.answer_from]
        if len(kept) < len(cases):
            log.info(
                "--fresh answer: %d cases edit the previous answer; left out",
                len(cases) - len(kept),
            )
        cases = kept
    if args.case:
        by = {c.name: c for c in cases}
        missing = [n for n in args.case if n not in by]
        if missing:
            names = "\n  ".join(by)
            raise SystemExit(f"bench: no case {', '.join(missing)}; the cases are:\n  {names}")
        return [by[n] for n in args.case]
    return cases[: args.cases] if args.cases > 0 else cases


class Runner:
    """One host session of the benchmark: the engine, its fills, the
    Control client, and what every case scored.
    """

    def __init__(self, args: argparse.Namespace, tm: models.TinyModel) -> None:
        self.args = args
        self.tm = tm
        layout = tm.layout(args.page_size)
        if args.kv_dtype:
            layout = dataclasses.replace(layout, dtype=args.kv_dtype)
        self.e = TorchEngine(
            tm,
            args.engine_socket,
            page_size=args.page_size,
            engine_id="bench-splice-quality",
            layout=layout,
        )
        self.fills = FillServer(self.e).start()
        self.cc = ControlClient(args.control_socket, source="bench-splice-quality")
        self.results: list[qualityreport.CaseResult] = []
        self.sessions: list[tuple[str, int]] = []  # the case's sessions and their lengths
        self.checks: dict[str, Any] = {
            "control_max_abs_logit_diff": 0.0,
            "rotation_cases": 0,
            "rotation_failures": [],
            "host_guard_matches_trajectory": True,
        }

    def close(self) -> None:
        """Closes the engine and the client."""
        self.cc.close()
        self.e.close()

    def local(self, rows: list[tuple[torch.Tensor, ...]], n: int, capacity: int) -> LocalCache:
        """A LocalCache holding ``rows`` of positions ``[0, n)``."""
        lc = LocalCache(self.e.paged, self.e.layout, capacity)
        lc.put([tuple(b[:n] for b in layer) for layer in rows], range(n))
        return lc

    def cached_from(self, c: Case) -> int:
        """How much of the original context the host is given to cache
        before the splice (it caches the full pages of it). Two pages past
        the last edit at least, so that after the edit's page a kept token
        is cached (only cached text is spliced).
        """
        if self.args.fresh == "page":
            return len(c.original)
        end = c.answer_from if self.args.fresh == "answer" else c.fresh_from
        return min(len(c.original), max(end, c.edits[-1].end + 2 * self.args.page_size))

    def host_arm(
        self, c: Case, lay: arms.Layout, name: str, capacity: int, **recompute: Any
    ) -> tuple[LocalCache, int, float]:
        """Splices ``c`` through the host as session ``<case>/<name>`` with
        ``recompute`` (directives.splice's arguments); returns the edited
        context's cache read back, the kept tokens recomputed (the host's
        named ones and the engine's choice) and the guard's estimate.
        """
        e, tenant = self.e, self.args.tenant
        sess = f"{c.name}/{name}"
        e.prefill(c.original[: self.cached_from(c)], session=sess, tenant=tenant)
        failures, rec0 = self.fills.failures, self.fills.recomputed
        ds = [
            directives.splice(sess, ed.start, ed.end, tokens=list(ed.replacement), **recompute)
            for ed in c.edits
        ]
        res = self.cc.apply(ds, tenant=tenant)
        named = res.results[0].effect.recomputed_tokens if recompute.get("recompute_first") else 0
        got = e.wait_cached(c.edited, lay.cached, tenant=tenant, timeout=600)
        if self.fills.failures != failures:
            raise RuntimeError(f"{sess}: fill failed: {self.fills.last_error}")
        if got != lay.cached:
            raise RuntimeError(f"{sess}: the host caches {got} edited tokens, {lay.cached} planned")
        n, rows = read_cached_layers(e, c.edited, tenant=tenant)
        lc = self.local(rows, n, capacity)
        # The next arm's splice must build its own branch: pages of the
        # edited sequence already cached would be adopted as they are. The
        # rest of the session goes when the case ends (forget).
        self.cc.apply([directives.evict(sess, lay.first, lay.cached, mode="forget")], tenant=tenant)
        self.sessions.append((sess, lay.first))
        return lc, named + self.fills.recomputed - rec0, self.fills.last_estimate

    def forget(self) -> None:
        """Drops the case's sessions from the cache (a splice takes fresh
        device pages; it does not evict others' to get them).
        """
        for sess, n in reversed(self.sessions):
            self.cc.apply([directives.evict(sess, 0, n, mode="forget")], tenant=self.args.tenant)
        self.sessions = []

    def run_case(self, c: Case) -> None:
        """Every arm on one case."""
        t0 = time.perf_counter()
        ps = self.args.page_size
        n = self.cached_from(c)
        lay = arms.layout_of(c, ps, n)
        # The edited region is what the edit makes stale: the cached tokens
        # from the first edit on. What follows them is prefilled fresh by
        # every arm, the reference's re-prefill too, so it is not counted.
        region = lay.cached - lay.first
        cap = max(len(c.original), len(c.edited)) + len(c.continuation) + 2 * ps
        base = len(lay.fills)
        res = qualityreport.CaseResult(case=c, region=region, fresh=len(c.edited) - lay.cached)

        # The original prefill, once, through the host.
        self.e.prefill(c.original[:n], session=f"{c.name}/orig", tenant=self.args.tenant)
        self.sessions.append((f"{c.name}/orig", n))
        n_orig, rows = read_cached_layers(self.e, c.original[:n], tenant=self.args.tenant)
        orig = self.local(rows, n_orig, cap)
        del rows

        sp, _, _ = self.host_arm(c, lay, "splice", cap)
        self.rotation_check(c, orig, n_orig, sp, lay)
        ref_cache = arms.reference(sp, c, lay)
        # Every token's logits, for the control's check; the score's are
        # among them.
        ref_every = ref_cache.logits(c.edited, lay.cached, c.continuation, every=True)
        ref = log_probs(continuation_logits(ref_every, c.continuation))
        del ref_cache

        def put(
            name: str, lp: torch.Tensor, recomputed: int | None, computed: int | None = None
        ) -> Score:
            s = score(
                ref, lp, c.continuation, region=region, recomputed=recomputed, computed=computed
            )
            res.arms[name] = s
            return s

        def scored(lc: LocalCache, shift: int = 0) -> torch.Tensor:
            return lc.score(c.edited, lay.cached, c.continuation, rope_shift=shift)

        put("reprefill", ref, region)
        put("splice", scored(sp), base)

        ctl, rec, _ = self.host_arm(c, lay, "control", cap, recompute_share=1.0)
        ctl_every = ctl.logits(c.edited, lay.cached, c.continuation, every=True)
        self.control_check(ctl_every, ref_every)
        put("control", log_probs(continuation_logits(ctl_every, c.continuation)), base + rec)
        del ctl, ctl_every, ref_every

        gp, shift = arms.gap(orig, n_orig, c)
        put("splice_gap", scored(gp, shift), base)
        del gp

        for k in FIRST_K:
            lc, rec, _ = self.host_arm(c, lay, f"first{k}", cap, recompute_first=k)
            put(f"recompute_first_{k}", scored(lc), base + rec)

        dev = arms.layer1_deviation(sp, c, lay.kept)
        probe = math.ceil(len(lay.kept) / self.e.paged.layers)  # layer 0 of every kept token
        for r in DEVIATION_SHARES:
            m = min(len(lay.kept), max(1, round(r * region)))
            pick = sorted(torch.as_tensor(lay.kept)[torch.topk(dev, m).indices].tolist())
            lp = scored(arms.recompute(sp, c, lay, pick))
            put(f"recompute_deviation_{round(r * 100)}", lp, base + m, base + m + probe)

        lp = orig.score(c.original, n_orig, c.continuation)
        put("no_edit", lp, None)

        # The guard's path in torch: the first-k curve and the guard at
        # every budget (qualityreport), and what the host's guard must match.
        def on_step(lc: LocalCache, k: int, est: float, computed: int) -> None:
            s = score(ref, scored(lc), c.continuation, region=region,
                      recomputed=base + k, computed=computed)  # fmt: skip
            res.trajectory.append(qualityreport.Step(k=k, score=s, estimate=est))

        res.echo = len(arms.trajectory(sp, c, lay, on_step))
        res.candidates = len(lay.kept)
        last = res.trajectory[-1].score.computed if res.trajectory else None
        done = res.trajectory[-1].k if res.trajectory else 0
        res.fallback_computed = (last or base) + len(lay.kept) - done

        g, rec, est = self.host_arm(c, lay, "guard", cap, max_kl=self.args.max_kl)
        want = qualityreport.guard_at(res, self.args.max_kl)
        guard = put("guard", scored(g), base + rec, want.computed)
        res.guard_estimate = est
        del g
        self.guard_check(res, guard, want)
        self.forget()
        res.wall_s = time.perf_counter() - t0
        self.results.append(res)
        log.info(
            "%s: splice KL %.4f, guard KL %.4f at %.0f%% (estimate %.4f), %.0f s",
            c.name,
            res.arms["splice"].kl_mean,
            guard.kl_mean,
            100 * guard.share,
            est,
            res.wall_s,
        )

    def control_check(self, ctl: torch.Tensor, ref: torch.Tensor) -> None:
        """The control's logits against the reference's, every token run
        (the request's new messages too), bit for bit.
        """
        diff = float((ctl - ref).abs().max())
        self.checks["control_max_abs_logit_diff"] = max(
            self.checks["control_max_abs_logit_diff"], diff
        )

    def guard_check(self, res: qualityreport.CaseResult, guard: Score, want: Score) -> None:
        """The host's guard recomputes what its path in torch says, to the
        same answers (the passes differ in chunking only).
        """
        if want.recomputed != guard.recomputed or abs(want.kl_mean - guard.kl_mean) > 1e-6:
            self.checks["host_guard_matches_trajectory"] = False
            log.warning(
                "%s: the host's guard recomputed %s (KL %.6f); its path in torch %s (KL %.6f)",
                res.case.name,
                guard.recomputed,
                guard.kl_mean,
                want.recomputed,
                want.kl_mean,
            )

    def rotation_check(
        self, c: Case, orig: LocalCache, n_orig: int, sp: LocalCache, lay: arms.Layout
    ) -> None:
        """The splice contract at layer 0 (single-edit cases: the check takes
        one edit).
        """
        if len(c.edits) != 1:
            return
        ed = c.edits[0]
        before = orig.get(range(n_orig))[0]
        after = sp.get(range(lay.cached))[0]
        chk = check_splice(
            self.tm,
            self.e.layout,
            self.e.rope,
            before=before,
            after=after,
            edited=c.edited,
            start=ed.start,
            end=ed.end,
            replacement=list(ed.replacement),
            angle_rounding=True,
            first_layer_only=True,
        )
        self.checks["rotation_cases"] += 1
        if not chk.ok:
            self.checks["rotation_failures"].append(f"{c.name}: {chk.failures[:2]}")


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints its JSON report on stdout."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir())
    cases = select_cases(args, tok)
    tm = models.build(models.SMOLLM2)
    t0 = time.perf_counter()
    r = Runner(args, tm)
    try:
        for k, c in enumerate(cases):
            log.info("case %d/%d: %s", k + 1, len(cases), c.name)
            r.run_case(c)
    finally:
        r.close()
    rep = qualityreport.report(r.results, r.checks, args, tm, time.perf_counter() - t0)
    sys.stdout.write(json.dumps(rep) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
