"""The worker's saves: pages out of vLLM's blocks into kvpilot, behind the forward.

A save of a kvpilot request's pages ``[first, end)`` allocates staging
slots, copies the pages there from their vLLM blocks, and commits them
(Commit's ``first_page``: the pages before ``first`` are named by their
tokens alone; the host holds them on its device tier until the prompt's
last page is committed, and their slots are never sent again).
Done inline, all of it sits on the request's path: vLLM samples the step's
tokens after ``wait_for_save``. So ``wait_for_save`` queues each save on
one background thread (kvpilot.vllm.savequeue) and returns. What makes that
safe:

- **The source blocks stay put.** A running request's full prompt blocks
  are never rewritten. When it finishes, the scheduler side keeps its blocks
  (``request_finished`` returns True) until the worker names the request in
  ``finished_sending``, once its saves are over; both sides decide from the
  same fact, whether a background save was planned for the request. A
  preempted request's blocks are freed at once, so before the step's
  forward (``handle_preemptions``) the worker cancels its queued saves and
  waits for a copy out of its blocks already under way (a memory copy).
- **The staging slots stay the request's.** The scheduler side ends a
  kvpilot request (Finish, Release) only after the worker reported all of
  its background saves done (KvpilotWorkerMetadata), so no slot a save
  still writes is freed and handed to another request or to a load-back.
- **A gap is never committed.** Once one save of a kvpilot request is
  skipped or fails, its later saves are skipped too.
- **No page is cached with a rank's slice missing.** Under tensor
  parallelism every rank's saver runs the same saves on its own slice of
  the heads: each asks for the save's slots by its first page (the host
  hands every rank the same ones) and commits as its part; the host
  caches the pages when the last rank commits (host/engine, parts.go). A
  rank whose save is skipped or fails never commits it, nor any later save
  of the request, so those pages stay uncached for every rank.
- **No slot outlives its registration.** Allocate and Commit name the
  registration the save was planned under; after a host restart they are
  not sent (the same slot number names another page in the new pools).

Backpressure is a skipped save, never a stall: a save that finds
``save_queue_pages`` pages queued waits at most ``save_wait_ms`` for room,
then is skipped, as is one that finds staging full. Every page not saved
is counted by reason and logged (kvpilot.vllm.losses). A request that pins
its pages with cache_control is saved before its step ends instead (its
Finish, which pins, must see the pages committed): it waits at most the
host's call timeout.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kvpilot.engine_types import FEATURE_COMMIT_FIRST_PAGE
from kvpilot.errors import CapacityExhausted, HostRestarted, KvpilotError
from kvpilot.vllm import losses
from kvpilot.vllm.health import HostHealth
from kvpilot.vllm.losses import LossLog, SaveCounters
from kvpilot.vllm.metadata import KvpilotConnectorMetadata, KvpilotWorkerMetadata, PageSave
from kvpilot.vllm.savequeue import SaveCancelled, SaveJob, SaveQueue
from kvpilot.vllm.settings import ConnectorSettings

if TYPE_CHECKING:
    from kvpilot.engine import EngineClient


class PageSource(Protocol):
    """What the saves need of the worker side (kvpilot.vllm.worker.WorkerSide,
    which owns the saver: named here by what it does, so the two modules do
    not import each other).
    """

    settings: ConnectorSettings
    health: HostHealth
    client: EngineClient | None
    #: This process's part of a page (its tensor-parallel rank + 1), 0
    #: when it writes whole pages.
    part: int

    def current(self, registration_id: str) -> bool:
        """Whether the staging mapping is the registration's."""
        ...

    def copy_out(
        self, registration_id: str, block_ids: Sequence[int], slots: Sequence[int]
    ) -> None:
        """Copies the pages of vLLM blocks into staging slots (all layers)."""
        ...


# How long an idle step waits for a save to finish.
_IDLE_WAIT_S = 0.005


@dataclass
class _KvSaves:
    """One kvpilot request's saves so far: pages [0, pages) are in kvpilot
    (matched, or committed by its saves), in ``slots`` (kept for a host
    without ``commit_first_page`` only: their slots are never sent again
    to one that has it).
    """

    pages: int
    slots: list[int]
    broken: bool = False


def one_torch_thread() -> None:
    """Makes torch run this thread's (the save thread's) operations on
    this thread alone, outside OpenMP.

    libgomp lets its idle worker threads spin between parallel regions
    only while the process holds no more OpenMP threads than it has CPUs.
    vLLM's forward team already has one per CPU; a second team, the save
    thread's own (created by its first parallel copy), tips the process
    over, and from then on each of the hundreds of parallel regions of a
    forward first wakes its workers from sleep. On 2 cores (vLLM's CPU build,
    SmolLM2-135M-Instruct, 4,000 tokens) a process that had saved once
    answered its own prefix hits in 112-122 ms, with a second core barely
    used, where a process without the connector took 67-72 ms; with the
    save thread single-threaded, 70-75 ms. A copy behind the forward needs
    no second core.

    vLLM's CPU worker replaces ``torch.set_num_threads`` with a warning
    (its own threads are bound to cores); ``torch._C.set_num_threads`` is
    the original. It sets this thread's OpenMP team size, and also the
    default for threads that have not yet run a torch operation (vLLM's
    forward thread has).
    """
    import torch

    torch._C.set_num_threads(1)


class Saver:
    """The worker's saves and what vLLM and the scheduler side hear of them."""

    def __init__(self, worker: PageSource, log: logging.Logger) -> None:
        self.worker = worker
        self.log = log
        s = worker.settings
        self.queue = SaveQueue(s.save_queue_pages, log, on_start=one_torch_thread)
        self.wait_s = s.save_wait_ms / 1000.0
        self.counters = SaveCounters()
        self.losses = LossLog(self.counters, log, s.loss_log_interval_s)
        # Per kvpilot request; a request's entry is touched by one thread
        # only: the save thread for background saves, the step's otherwise.
        self._kv: dict[str, _KvSaves] = {}
        self._kv_of: dict[str, set[str]] = {}
        # vLLM requests with a background save since they last started, and
        # finished ones whose blocks wait for their saves to end.
        self._background: set[str] = set()
        self._finishing: set[str] = set()
        # Saves the queue refused, reported done with the queue's own (a
        # later save of the same request then finds a gap and is skipped).
        self._not_queued: dict[str, int] = {}

    # ------------------------------------------------------------ the step

    def stop_preempted(self, meta: KvpilotConnectorMetadata) -> None:
        """handle_preemptions: no copy out of a preempted request's blocks
        after this returns; its queued saves end as skipped.
        """
        gone = set(meta.preempted)
        if not gone:
            return
        self.queue.stop(gone)
        self._background -= gone
        for rid in gone:
            self._forget_after_queue(rid)

    def save(self, meta: KvpilotConnectorMetadata) -> None:
        """wait_for_save: queues the step's background saves and runs the
        others now.
        """
        if meta.idle and self._finishing:
            # vLLM steps only to hear that saves are done: without a pause
            # it would spin on a core the save thread needs.
            self.queue.wait_progress(_IDLE_WAIT_S)
        for sv in meta.saves:
            self._kv_of.setdefault(sv.req_id, set()).add(sv.kv_request_id)
            if not sv.background:
                self._run(sv, None)
                continue
            self._background.add(sv.req_id)
            if not self.queue.submit(sv, self._run_job, self.wait_s):
                self._skip(sv, losses.QUEUE_FULL, "save_queue_pages pages were already waiting")
                self._not_queued[sv.kv_request_id] = self._not_queued.get(sv.kv_request_id, 0) + 1

    def finished_sending(self, finished: set[str]) -> set[str]:
        """The finished requests whose blocks vLLM may free now: those with
        background saves, once the saves are over.
        """
        for rid in finished:
            if rid in self._background:
                self._background.discard(rid)
                self._finishing.add(rid)
            self._forget_after_queue(rid)
        out = {rid for rid in self._finishing if self.queue.pending(rid) == 0}
        self._finishing -= out
        return out

    def worker_meta(self) -> KvpilotWorkerMetadata | None:
        """The background saves done since the last step, for the scheduler."""
        self.losses.flush()
        done = self.queue.take_done()
        for kv, n in self._not_queued.items():
            done[kv] = done.get(kv, 0) + n
        self._not_queued = {}
        return KvpilotWorkerMetadata(done=done) if done else None

    def close(self, timeout: float) -> None:
        """Lets queued saves finish for up to timeout."""
        self.queue.close(timeout)

    # ------------------------------------------------------------ one save

    def _run_job(self, job: SaveJob) -> None:
        if job.cancelled:
            self._skip(job.save, losses.PREEMPTED)
            raise SaveCancelled(job.save.req_id)
        self._run(job.save, job)

    def _run(self, sv: PageSave, job: SaveJob | None) -> None:
        st = self._kv.get(sv.kv_request_id)
        if st is None:
            st = _KvSaves(len(sv.matched_slots), list(sv.matched_slots))
            self._kv[sv.kv_request_id] = st
        why = self._why_not(sv, st)
        if why:
            st.broken = True
            self._skip(sv, why)
            return
        w = self.worker
        assert w.client is not None  # _why_not checked
        reg = sv.registration_id
        try:
            try:
                slots = list(
                    w.client.allocate(
                        sv.kv_request_id,
                        sv.pages,
                        timeout=w.settings.timeout_s,
                        registration_id=reg,
                        part=w.part,
                        first_page=sv.first_page if w.part else 0,
                    ).page_slots
                )
            except CapacityExhausted:
                slots = []
            if len(slots) != sv.pages:
                st.broken = True
                self._skip(sv, losses.STAGING_FULL)
                return
            with job.copy_region() if job is not None else contextlib.nullcontext():
                w.copy_out(reg, sv.block_ids, slots)
            self.counters.add(copied=sv.pages)
            if w.part or FEATURE_COMMIT_FIRST_PAGE in w.client.registration.features:
                first, st.slots = sv.first_page, []
            else:
                first, st.slots = 0, st.slots + slots
                slots = st.slots
            r = w.client.commit(
                sv.kv_request_id,
                sv.tokens,
                slots,
                first_page=first,
                timeout=w.settings.timeout_s,
                registration_id=reg,
                part=w.part,
            )
        except SaveCancelled:
            st.broken = True
            self._skip(sv, losses.PREEMPTED)
            raise
        except HostRestarted as e:
            st.broken = True
            self._skip(sv, losses.HOST_RESTARTED, str(e))
            return
        except Exception as e:
            st.broken = True
            # The host's back-off (and its log of a host gone); the page
            # accounting and its log are ours.
            w.health.failed("saving pages to kvpilot", e, quiet=True)
            code = e.code if isinstance(e, KvpilotError) and e.code else "internal"
            self.losses.lost("failed", code, sv.pages, sv.req_id, str(e))
            return
        st.pages = sv.end_page
        w.health.ok()
        self.counters.add(committed=r.stored)

    def _why_not(self, sv: PageSave, st: _KvSaves) -> str:
        """Why sv is not to be sent to the host ("": it is)."""
        w = self.worker
        if st.broken or st.pages != sv.first_page:
            return losses.AFTER_GAP
        if sv.pages <= 0 or len(sv.block_ids) != sv.pages:
            return losses.BAD_PLAN
        if w.client is None or not w.health.usable():
            return losses.HOST_AWAY
        if not w.current(sv.registration_id):
            return losses.HOST_RESTARTED
        return ""

    def _skip(self, sv: PageSave, reason: str, detail: str = "") -> None:
        self.losses.lost("skipped", reason, sv.pages, sv.req_id, detail)

    def _forget_after_queue(self, rid: str) -> None:
        """Drops rid's kvpilot requests once the saves queued so far ran
        (the step thread owns _kv_of; the entries of _kv go on the save
        thread, after their last save).
        """
        kvs = self._kv_of.pop(rid, set())
        if not kvs:
            return

        def forget() -> None:
            for kv in kvs:
                self._kv.pop(kv, None)

        self.queue.then(forget)
