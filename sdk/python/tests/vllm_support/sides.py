"""Both sides of the connector driven step by step the way vLLM's scheduler
and model runner drive them, without starting vLLM itself: vLLM's own
request, spec and config classes, and its CPU attention kernel writing the
KV cache (tests/vllm_support/cpu_attention.py).
"""

from __future__ import annotations

import logging
import types
import zlib
from typing import Any

import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.request import Request, RequestStatus

from kvpilot.vllm.scheduler import SchedulerSide
from kvpilot.vllm.settings import ConnectorSettings
from kvpilot.vllm.worker import WorkerSide
from tests.vllm_support.cpu_attention import CpuAttention

PAGE, HEADS, DIM, LAYERS, BLOCKS = 32, 2, 32, 2, 16
NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
log = logging.getLogger("test.vllm.sides")


def kv_cache_config() -> KVCacheConfig:
    spec = FullAttentionSpec(
        block_size=PAGE, num_kv_heads=HEADS, head_size=DIM, dtype=torch.bfloat16
    )
    return KVCacheConfig(
        num_blocks=BLOCKS,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(layer_names=list(NAMES), kv_cache_spec=spec)],
    )


def vllm_config(layers: dict[str, Any] | None = None, role: str = "kv_both") -> Any:
    """The parts of a VllmConfig the connector reads."""
    return types.SimpleNamespace(
        parallel_config=types.SimpleNamespace(
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            decode_context_parallel_size=1,
            data_parallel_rank=0,
        ),
        kv_transfer_config=types.SimpleNamespace(
            engine_id="engine-1",
            is_kv_producer=role in ("kv_both", "kv_producer"),
            is_kv_consumer=role in ("kv_both", "kv_consumer"),
        ),
        model_config=types.SimpleNamespace(
            served_model_name="tiny",
            model="/models/tiny",
            hf_text_config=types.SimpleNamespace(
                model_type="llama", rope_parameters={"rope_theta": 1e4, "rope_type": "default"}
            ),
        ),
        cache_config=types.SimpleNamespace(cache_dtype="auto"),
        compilation_config=types.SimpleNamespace(static_forward_context=layers or {}),
    )


class Engine:
    """One engine's two connector sides, its KV cache and a step loop."""

    def __init__(self, socket: str, role: str = "kv_both", **extra: Any) -> None:
        # A call to the host may take seconds on a loaded machine: the
        # deployed 2 s would turn that into a failed save or load and change
        # what a test counts. Tests of the deadline itself pass their own.
        settings = ConnectorSettings.from_extra_config(
            {"socket": socket, "timeout_s": 30.0, **extra}
        )
        self.layers = {n: types.SimpleNamespace(impl=CpuAttention()) for n in NAMES}
        self.caches = {
            n: torch.zeros(BLOCKS, HEADS, PAGE, 2 * DIM, dtype=torch.bfloat16) for n in NAMES
        }
        cfg = vllm_config(self.layers, role)
        # vLLM builds the workers' caches before the scheduler.
        self.worker = WorkerSide(cfg, kv_cache_config(), settings, log)
        self.worker.register(self.caches)
        self.sched = SchedulerSide(cfg, kv_cache_config(), settings, log)
        self.next_block = 1  # block 0 is vLLM's null block

    def request(
        self,
        rid: str,
        tokens: list[int],
        params: dict[str, Any] | None = None,
        kv_hints: Any = None,
    ) -> Request:
        sp = SamplingParams(
            max_tokens=4, extra_args={"kv_transfer_params": params} if params else None
        )
        return Request(rid, tokens, sp, None, kv_hints=kv_hints)

    def prefill(self, req: Request, *, wait: bool = True, chunk: int = 0) -> tuple[int, list[int]]:
        """Schedules req's prefill as vLLM's scheduler would, runs the step
        (loads, the 'forward' writing random K/V for computed tokens, saves),
        and returns the external tokens and the request's blocks. With wait,
        the background saves are done and reported before it returns. With
        chunk, the prompt after the external tokens is prefilled chunk
        tokens a step (vLLM's chunked prefill): one save a step.
        """
        ext, _ = self.sched.lookup(req, 0)
        n_blocks = -(-req.num_tokens // PAGE)
        blocks = list(range(self.next_block, self.next_block + n_blocks))
        self.next_block += n_blocks
        self.sched.allocated(req, types.SimpleNamespace(get_block_ids=lambda: (blocks,)), ext)
        self._steps(req, blocks, ext, chunk or req.num_tokens - ext, wait)
        return ext, blocks

    def _steps(self, req: Request, blocks: list[int], ext: int, chunk: int, wait: bool) -> None:
        """Runs req's prefill after its ext external tokens, chunk tokens a
        step, as vLLM's scheduler schedules a new request and then a cached
        one.
        """
        state = types.SimpleNamespace(get_block_ids=lambda rid: (blocks,))
        done = ext
        while done < req.num_tokens:
            n = min(chunk, req.num_tokens - done)
            first = done == ext
            new = [
                types.SimpleNamespace(
                    req_id=req.request_id, num_computed_tokens=done, block_ids=(blocks,)
                )
            ]
            out = types.SimpleNamespace(
                preempted_req_ids=set(),
                scheduled_new_reqs=new if first else [],
                scheduled_cached_reqs=types.SimpleNamespace(
                    req_ids=[] if first else [req.request_id],
                    num_computed_tokens=[] if first else [done],
                ),
                num_scheduled_tokens={req.request_id: n},
                kv_connector_block_state=state,
            )
            meta = self.sched.build_meta(out)
            self.worker.load(meta)
            assert self.worker.take_failed_blocks() == set()
            self._forward(req, blocks, done, done + n)
            self.worker.handle_preemptions(meta)
            self.worker.save(meta)
            req.status = RequestStatus.RUNNING
            done += n
            req.num_computed_tokens = done
            if wait:
                self.settle()

    def _forward(self, req: Request, blocks: list[int], start: int, end: int) -> None:
        """Writes K/V of tokens [start, end) into their blocks, a function
        of the prompt and the position (the same in every engine).
        """
        slots = torch.tensor([blocks[t // PAGE] * PAGE + t % PAGE for t in range(start, end)])
        for name in NAMES:
            seed = zlib.crc32(repr((req.prompt_token_ids, name)).encode())
            g = torch.Generator().manual_seed(seed)
            k = torch.randn(req.num_tokens, HEADS, DIM, generator=g).to(torch.bfloat16)
            v = torch.randn(req.num_tokens, HEADS, DIM, generator=g).to(torch.bfloat16)
            self.layers[name].impl.do_kv_cache_update(
                None, k[start:end], v[start:end], self.caches[name], slots
            )

    def idle_step(self, preempted: set[str] = frozenset()) -> Any:
        """A scheduler output with nothing scheduled (but preemptions)."""
        return types.SimpleNamespace(
            preempted_req_ids=set(preempted),
            scheduled_new_reqs=[],
            scheduled_cached_reqs=types.SimpleNamespace(req_ids=[], num_computed_tokens=[]),
            num_scheduled_tokens={},
        )

    def report(self, finished: set[str] = frozenset()) -> set[str]:
        """What vLLM does at the end of a step: the worker's transfer
        results and metadata reach the scheduler side. Returns the requests
        whose blocks vLLM frees.
        """
        sending = self.worker.finished_sending(set(finished))
        self.sched.saves_done(
            types.SimpleNamespace(
                kv_connector_worker_meta=self.worker.worker_meta(), finished_sending=sending
            )
        )
        return sending

    def settle(self, finished: set[str] = frozenset()) -> set[str]:
        """Lets the background saves run, reports, and lets the Finish and
        Release calls that queued run.
        """
        assert self.worker.saver.queue.drain(30)
        freed = self.report(finished)
        assert self.sched.drain(30)
        return freed

    def finish(self, req: Request) -> dict[str, Any] | None:
        """Finishes req, then steps until vLLM would free its blocks."""
        req.status = RequestStatus.FINISHED_LENGTH_CAPPED
        hold, info = self.sched.finished(req)
        freed = self.settle({req.request_id})
        assert hold == (req.request_id in freed), (hold, freed)
        assert not self.sched.waiting_on_worker()
        return info

    def close(self) -> None:
        self.worker.close()
        self.sched.close()


def random_prompt(seed: int, n: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 500, (n,), generator=g).tolist()
