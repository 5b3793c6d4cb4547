"""``python -m kvbench.vllm``: the Python side of ``kvpilot bench vllm``.

Prints exactly one JSON object on stdout (kvbench.vllm.scenario says
what it holds); progress goes to stderr.

    python -m kvbench.vllm --kvpilot bin/kvpilot [--models smollm2,save-heavy-llama]
        [--tokens 4000] [--rounds 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

from kvbench.vllm.scenario import MODELS, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvbench.vllm")
    ap.add_argument("--kvpilot", required=True, help="the kvpilot binary the hosts run")
    ap.add_argument(
        "--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS)
    )
    ap.add_argument("--tokens", type=int, default=4000, help="prompt length")
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds, arms interleaved")
    ap.add_argument("--workdir", default="", help="keep the hosts' data and vLLM logs here")
    a = ap.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown or a.tokens < 64 or a.rounds < 1:
        ap.error(f"--models takes {', '.join(MODELS)}; --tokens >= 64, --rounds >= 1")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    # A stopped bench (kvpilot bench's context, timeout) still stops its
    # hosts and vLLM processes: SIGTERM unwinds through their finally blocks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = run(a.kvpilot, models, a.tokens, a.rounds, Path(a.workdir) if a.workdir else None)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
