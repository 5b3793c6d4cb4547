"""``python -m kvbench.vllm``: the Python side of ``kvpilot bench vllm``.

Prints exactly one JSON object on stdout (kvbench.vllm.scenario says
what it holds); progress goes to stderr.

    python -m kvbench.vllm --kvpilot bin/kvpilot [--config bf16,tp2,fp8,mla,swa]
        [--models smollm2,save-heavy-llama] [--tokens 4000] [--rounds 3] [--workdir DIR]

--config picks the configurations' models (kvbench.vllm.scenario.CONFIGS);
--models names models one by one; the default is the bf16 configuration.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

from kvbench.vllm.scenario import CONFIGS, MODELS, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvbench.vllm")
    ap.add_argument("--kvpilot", required=True, help="the kvpilot binary the hosts run")
    ap.add_argument("--models", default="", help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument(
        "--config", default="", help="comma-separated configurations: " + ", ".join(CONFIGS)
    )
    ap.add_argument("--tokens", type=int, default=4000, help="prompt length")
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds, arms interleaved")
    ap.add_argument("--workdir", default="", help="keep the hosts' data and vLLM logs here")
    a = ap.parse_args(argv)
    configs = [c for c in a.config.split(",") if c]
    models = [m for m in a.models.split(",") if m]
    if not models and not configs:
        configs = ["bf16"]
    unknown = [m for m in models if m not in MODELS] + [c for c in configs if c not in CONFIGS]
    if unknown or a.tokens < 64 or a.rounds < 1:
        ap.error(
            f"--models takes {', '.join(MODELS)}; --config takes {', '.join(CONFIGS)}; "
            "--tokens >= 64, --rounds >= 1"
        )
    for c in configs:
        models += [m for m in CONFIGS[c] if m not in models]
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
