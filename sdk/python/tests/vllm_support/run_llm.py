"""Runs vLLM's offline LLM on token-id prompts, one generate call per prompt.

Usage: ``python run_llm.py SPEC.json``. The spec names the model directory,
the block size, the connector's kv_connector_extra_config (absent: no
connector), the prompts (token ids, optional kv_transfer_params, optional
kv_hints: an envelope's fields, sent through ``LLMEngine.add_request``, the
way vLLM 0.32 takes KV hints offline) and the JSON file to write; optionally
``kv_events_endpoint`` (where vLLM's ZMQ KV event publisher binds),
``kv_cache_memory_bytes``, ``max_model_len``, ``max_num_seqs``,
``max_num_batched_tokens``, ``kv_cache_dtype``, ``tensor_parallel_size`` and
``pipeline_parallel_size`` (vLLM's multiprocess executor, a worker process
per rank), ``start_after``: a file whose creation the
prompts wait for once vLLM is up; ``batch``: all prompts in one generate
call, so vLLM runs them at once (scheduling, chunking and preempting them
as it must), ``batch_rounds`` times (default 1), or each list of prompts
in ``prompt_rounds`` as a batch in turn (``prompts`` is then unused); and
``connector_counters``: after the prompts, the worker-side connector's save
counters (vLLM in one process), once its saves are over. The file gets, per
prompt, its output token ids, num_cached_tokens, finish reason and output
kv_transfer_params, plus timings; or ``{"error": ...}`` when vLLM did not
start. vLLM's own logs go to stdout and stderr.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kwargs: dict[str, Any] = {}
    if spec.get("connector") is not None:
        ktc: dict[str, Any] = {
            "kv_connector": "KvpilotConnector",
            "kv_connector_module_path": "kvpilot.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": spec["connector"],
        }
        if spec.get("kv_load_failure_policy"):
            ktc["kv_load_failure_policy"] = spec["kv_load_failure_policy"]
        kwargs["kv_transfer_config"] = ktc
    if spec.get("kv_cache_dtype"):
        kwargs["kv_cache_dtype"] = spec["kv_cache_dtype"]
    if spec.get("tensor_parallel_size"):
        kwargs["tensor_parallel_size"] = spec["tensor_parallel_size"]
        kwargs["distributed_executor_backend"] = "mp"
    if spec.get("pipeline_parallel_size"):
        kwargs["pipeline_parallel_size"] = spec["pipeline_parallel_size"]
        kwargs["distributed_executor_backend"] = "mp"
    if spec.get("max_num_batched_tokens"):
        kwargs["max_num_batched_tokens"] = spec["max_num_batched_tokens"]
    if spec.get("kv_events_endpoint"):
        from vllm.config import KVEventsConfig

        kwargs["kv_events_config"] = KVEventsConfig(
            enable_kv_cache_events=True, publisher="zmq", endpoint=spec["kv_events_endpoint"]
        )
    t0 = time.monotonic()
    llm = LLM(
        model=spec["model"],
        skip_tokenizer_init=True,
        enforce_eager=True,
        block_size=spec["block_size"],
        dtype=spec.get("dtype", "bfloat16"),
        max_model_len=spec.get("max_model_len", 512),
        max_num_seqs=spec.get("max_num_seqs", 4),
        seed=0,
        kv_cache_memory_bytes=spec.get("kv_cache_memory_bytes", 64 << 20),
        **kwargs,
    )
    t1 = time.monotonic()
    if spec.get("start_after"):
        _wait_for_file(spec["start_after"])
    if spec.get("batch"):
        batches = spec.get("prompt_rounds") or [spec["prompts"]] * spec.get("batch_rounds", 1)
        rounds = [_batch(llm, spec, prompts) for prompts in batches]
        res: dict[str, Any] = {"init_s": t1 - t0, "generate_s": time.monotonic() - t1}
        res["rounds"] = rounds
        res["outputs"] = rounds[-1]
        if spec.get("connector_counters"):
            res["connector"] = _connector_counters()
        return res
    outputs = []
    for p in spec["prompts"]:
        extra = {}
        if p.get("kv_transfer_params") is not None:
            extra = {"kv_transfer_params": p["kv_transfer_params"]}
        sp = SamplingParams(
            max_tokens=spec.get("max_tokens", 8),
            temperature=0.0,
            detokenize=False,
            extra_args=extra or None,
        )
        try:
            prompt = TokensPrompt(prompt_token_ids=p["tokens"])
            if p.get("kv_hints") is not None:
                o = _with_hints(llm, f"hinted-{len(outputs)}", prompt, sp, p["kv_hints"])
            else:
                (o,) = llm.generate([prompt], sp, use_tqdm=False)
        except Exception as e:
            outputs.append({"exception": f"{type(e).__name__}: {e}"})
            continue
        c = o.outputs[0] if o.outputs else None
        outputs.append(
            {
                "token_ids": list(c.token_ids) if c else [],
                "finish_reason": c.finish_reason if c else None,
                "num_cached_tokens": o.num_cached_tokens,
                "kv_transfer_params": o.kv_transfer_params,
            }
        )
    return {"init_s": t1 - t0, "generate_s": time.monotonic() - t1, "outputs": outputs}


def _batch(llm: Any, spec: dict[str, Any], batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """All of batch's prompts in one generate call; an output each."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sp = SamplingParams(max_tokens=spec.get("max_tokens", 8), temperature=0.0, detokenize=False)
    prompts = [TokensPrompt(prompt_token_ids=p["tokens"]) for p in batch]
    outs = llm.generate(prompts, sp, use_tqdm=False)
    return [
        {
            "token_ids": list(o.outputs[0].token_ids),
            "num_cached_tokens": o.num_cached_tokens,
            "kv_transfer_params": o.kv_transfer_params,
        }
        for o in outs
    ]


def _connector_counters() -> dict[str, Any]:
    """The worker-side connector's counters once its queued saves ran."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    work = get_kv_transfer_group()._work
    drained = work.saver.queue.drain(60.0)
    return {"drained": drained, **work.counters, **work.saver.counters.as_dict()}


def _wait_for_file(path: str, timeout: float = 300.0) -> None:
    import os

    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)


def _with_hints(llm: Any, rid: str, prompt: Any, sp: Any, hints: dict[str, Any]) -> Any:
    from vllm.v1.kv_hints import KvHintAction, KvHintsEnvelope

    env = KvHintsEnvelope(
        protocol_version=hints["protocol_version"],
        message_id=hints["message_id"],
        actions=[KvHintAction(**a) for a in hints["actions"]],
    )
    engine = llm.llm_engine
    engine.add_request(rid, prompt, sp, kv_hints=env)
    done = []
    while engine.has_unfinished_requests():
        done += [o for o in engine.step() if o.finished]
    (o,) = done
    return o


def main() -> int:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    try:
        result = run(spec)
        code = 0
    except BaseException as e:
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        code = 2
    with open(spec["out"], "w") as f:
        json.dump(result, f)
    return code


if __name__ == "__main__":
    sys.exit(main())
