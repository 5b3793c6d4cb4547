"""The scheduler side of the connector: which pages to load and to save.

Per request, in vLLM's order:

1. ``lookup`` (get_num_new_matched_tokens): Match the prompt in kvpilot.
   The host loads the cached prefix back into staging slots and locks them
   for the request. vLLM is offered the matched pages beyond its own prefix
   hit, never the page holding the last prompt token (vLLM must compute at
   least one token to sample from).
2. ``allocated`` (update_state_after_alloc): vLLM took ``n`` external tokens
   and gave blocks for them: plan a load, staging slot -> vLLM block.
3. ``build_meta`` (build_connector_meta, every step): hand the planned loads
   to the worker, and for every scheduled request whose prompt gains full
   pages this step, plan a save: the worker allocates staging slots, copies
   the pages out and commits them behind the forward (kvpilot.vllm.saver).
4. ``finished`` (request_finished): Finish with the request's usage and
   cache_control (Release when it was aborted or never ran); vLLM keeps the
   blocks of a request with background saves until the worker is done.

A kvpilot request is ended only once the worker reported its background
saves done (``saves_done``, from the step's worker metadata), so no save
writes a staging slot the host has taken back. A preempted request
releases its kvpilot request and starts over with a new match when vLLM
schedules it again. Finish and Release run on a background thread, in
order: by then the request's saves are committed, so a later Match finds
its pages whether or not its end has run (an end only lets go of the
pages the request matched), and vLLM hands the output back without a
round trip to the host (1-8 ms of a 4,000-token hit of SmolLM2 on 2
cores). A request that pins with cache_control is finished in
``request_finished`` itself: its output reports the pin. Only Match
(and a pinning Finish) are calls on vLLM's path, each bounded by
``timeout_s``; anything kvpilot raises leaves the request without
kvpilot (kvpilot.hosthealth); the scheduler never fails because of the
host.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvpilot.engine_types import FinishResult, Registration, Usage
from kvpilot.vllm.events import EngineEvents, watch_host
from kvpilot.vllm.geometry import engine_id, geometry
from kvpilot.vllm.health import HostHealth
from kvpilot.vllm.hints import apply_hints
from kvpilot.vllm.hostlink import connect
from kvpilot.vllm.metadata import (
    KvpilotConnectorMetadata,
    KvpilotWorkerMetadata,
    PageLoad,
    PageSave,
)
from kvpilot.vllm.params import RequestParams, RequestParamsError
from kvpilot.vllm.savequeue import SaveQueue
from kvpilot.vllm.settings import ConnectorSettings

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request


@dataclass
class RequestState:
    """What the scheduler side knows of one vLLM request."""

    req_id: str
    prompt: list[int]
    params: RequestParams = field(default_factory=RequestParams)
    #: Why the request's kv_transfer_params were refused ("" when they were not).
    refused: str = ""
    #: The refusal was handed to vLLM (as a failed load) or could not be.
    refusal_done: bool = False
    #: The kvpilot request ("" when kvpilot is not used for it).
    kv_id: str = ""
    registration_id: str = ""
    #: Staging slot of each matched prompt page, from the root.
    slots: list[int] = field(default_factory=list)
    matched_pages: int = 0
    #: Matched pages vLLM may take: never the one holding the last token.
    usable_pages: int = 0
    #: Matched pages the host brought back from its colder tiers.
    reloaded_pages: int = 0
    #: Pages [0, saved_pages) are in kvpilot or planned to be saved.
    saved_pages: int = 0
    #: vLLM's own (block-aligned) prefix hit at the latest lookup.
    local_tokens: int = 0
    external_tokens: int = 0
    scheduled: bool = False
    saving: bool = True
    #: A background save was planned since the request last started: vLLM
    #: keeps its blocks after it finishes until the worker is done.
    background_saves: bool = False


@dataclass(frozen=True)
class _End:
    """A Finish or Release waiting for the request's background saves."""

    registration_id: str
    finish: bool
    usage: Usage | None
    cache_control: dict[str, Any] | None


class SchedulerSide:
    """The scheduler-side connector's state and calls to the host."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        kv_cache_config: KVCacheConfig,
        settings: ConnectorSettings,
        log: logging.Logger,
    ) -> None:
        self.settings = settings
        self.log = log
        self.geo = geometry(vllm_config, kv_cache_config, settings)
        self.page = self.geo.layout.page_size
        self.engine_id = engine_id(vllm_config, settings)
        self.health = HostHealth("scheduler", settings.retry_after_s, log)
        # The worker registered first (vLLM builds the scheduler after the
        # workers' caches), so this joins its registration.
        self.client = connect(
            settings,
            self.geo,
            self.engine_id,
            reset_cache=False,
            log=log,
            on_reregister=self._reregistered,
        )
        reg = self.client.registration
        if not reg.joined:
            log.warning(
                "kvpilot connector (scheduler): registration %s did not join a worker's; the "
                "worker joins it on its next call",
                reg.id,
            )
        log.info(
            "kvpilot connector (scheduler): engine %s registered with %s as %s (%s)",
            self.engine_id,
            settings.socket,
            reg.id,
            self.geo.describe(),
        )
        # kv_role: kv_both loads and saves; kv_consumer only loads (a
        # read-only engine), kv_producer only saves (one that fills kvpilot).
        ktc = vllm_config.kv_transfer_config
        self.loads = bool(getattr(ktc, "is_kv_consumer", True))
        self.saves = bool(getattr(ktc, "is_kv_producer", True))
        self.requests: dict[str, RequestState] = {}
        self._loads: list[PageLoad] = []
        self._refusals: dict[str, str] = {}
        # Background saves the worker has not reported done, by kvpilot
        # request; the ends waiting for them; preempted requests whose saves
        # the worker must stop; finished requests whose blocks vLLM keeps.
        self._inflight: dict[str, int] = {}
        self._ending: dict[str, _End] = {}
        self._stopped: list[str] = []
        self._held: set[str] = set()
        # Finish and Release, in order, off vLLM's path (see the module doc):
        # a queue of steps only (``then``), so it holds no pages.
        self._ends = SaveQueue(0, log, name="kvpilot-ends")
        self._seq = itertools.count()
        self.kv_cache_manager: KVCacheManager | None = None
        # kvpilot's pages in vLLM's own KV events, when vLLM publishes them.
        self.events: EngineEvents | None = None
        kec = getattr(vllm_config, "kv_events_config", None)
        if kec is not None and getattr(kec, "enable_kv_cache_events", False):
            self.events = EngineEvents(self.page, log, watch_host(settings.control_socket))
            self.events.start()
            log.info(
                "kvpilot connector (scheduler): kvpilot's host, disk and remote pages join "
                "vLLM's KV events (from %s)",
                settings.control_socket,
            )
        #: Counters since start (tokens vLLM took from kvpilot, pages loaded
        #: back from colder tiers, pages planned to be saved, refusals).
        self.counters = {"hit_tokens": 0, "reloaded_pages": 0, "saved_pages": 0, "refused": 0}

    # ---------------------------------------------------------------- lookup

    def lookup(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        """get_num_new_matched_tokens: kvpilot's tokens beyond vLLM's own hit."""
        try:
            st = self.requests.get(request.request_id)
            if st is not None and st.scheduled:
                # Preempted and scheduled again: start over from a new match.
                self._stop(st)
                st = None
            if st is None:
                st = self._begin(request)
            if st.refused:
                if st.refusal_done:
                    return 0, False
                # Reported as a failed asynchronous load of one token: the
                # way vLLM's API fails a single request.
                return 1, True
            st.local_tokens = num_computed_tokens
            if not st.kv_id or not self.loads:
                return 0, False
            return max(st.usable_pages * self.page - num_computed_tokens, 0), False
        except Exception as e:
            self.health.failed("matching a request", e)
            return 0, False

    def _begin(self, request: Request) -> RequestState:
        rid = request.request_id
        st = RequestState(req_id=rid, prompt=list(request.prompt_token_ids or ()))
        self.requests[rid] = st
        try:
            st.params = apply_hints(
                RequestParams.parse(request.kv_transfer_params), getattr(request, "kv_hints", None)
            )
            st.params.check_prompt(len(st.prompt))
        except RequestParamsError as e:
            st.refused = f"kvpilot connector: request {rid}: {e}"
            self.counters["refused"] += 1
            self.log.warning("%s", st.refused)
            return st
        if not self.health.usable():
            return st
        tokens = list(request.all_token_ids[: request.num_tokens])
        kv_id = _kv_request_id(rid, next(self._seq))
        try:
            m = self.client.match(
                tokens,
                session=st.params.session,
                tenant=st.params.tenant,
                # Reasoning spans reach the host's policies as assistant
                # messages holding them (think-evict reads them).
                messages=[
                    {"role": "assistant", "span": sp, "thinking": [sp]} for sp in st.params.thinking
                ],
                request_id=kv_id,
                load_back_deadline_ms=self.settings.load_back_deadline_ms,
                timeout=self.settings.timeout_s,
            )
        except Exception as e:
            self.health.failed("Match", e)
            return st
        self.health.ok()
        if self.events is not None:
            self.events.learn(tokens, m.block_hashes)
        st.kv_id = m.request_id or kv_id
        st.registration_id = self.client.registration.id
        staging = self.client.device.slots
        if (
            m.page_size != self.page
            or m.cached_tokens != len(m.page_slots) * self.page
            or any(not 0 <= s < staging for s in m.page_slots)
        ):
            self.log.error(
                "kvpilot connector: Match answered %d tokens in slots %s of %d-token pages "
                "(staging holds %d slots); ignoring the hit",
                m.cached_tokens,
                m.page_slots[:8],
                m.page_size,
                staging,
            )
            m_slots: list[int] = []
        else:
            m_slots = list(m.page_slots)
        st.slots = m_slots
        st.matched_pages = st.saved_pages = len(m_slots)
        st.usable_pages = min(len(m_slots), (request.num_tokens - 1) // self.page)
        st.reloaded_pages = m.loaded_pages
        return st

    # ------------------------------------------------------------- allocated

    def allocated(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        """update_state_after_alloc: plan the load of the external tokens."""
        try:
            st = self.requests.get(request.request_id)
            if st is None:
                return
            if st.refused:
                if not st.refusal_done:
                    st.refusal_done = True
                    if num_external_tokens > 0:
                        self._refusals[st.req_id] = st.refused
                return
            if num_external_tokens <= 0 or not st.kv_id:
                st.external_tokens = 0
                return
            first = st.local_tokens // self.page
            n = -(-num_external_tokens // self.page)
            block_ids = list(blocks.get_block_ids()[0][first : first + n])
            slots = st.slots[first : first + n] if first + n <= st.usable_pages else []
            # An inconsistent plan still goes to the worker, which reports the
            # blocks as failed loads rather than leave them unwritten.
            self._loads.append(PageLoad(st.req_id, st.registration_id, slots, block_ids))
            st.external_tokens = num_external_tokens
            self.counters["hit_tokens"] += num_external_tokens
            self.counters["reloaded_pages"] += st.reloaded_pages
            self.log.debug(
                "kvpilot connector: request %s takes %d tokens from kvpilot (%d pages loaded "
                "back from colder tiers)",
                st.req_id,
                num_external_tokens,
                st.reloaded_pages,
            )
        except Exception as e:
            self.health.failed("planning a load", e)

    # ------------------------------------------------------------ build_meta

    def build_meta(self, out: SchedulerOutput) -> KvpilotConnectorMetadata:
        """build_connector_meta: this step's loads, saves, stopped requests
        and refusals.
        """
        try:
            for rid in out.preempted_req_ids or ():
                st = self.requests.get(rid)
                if st is not None and st.scheduled:
                    self._stop(st)
        except Exception as e:
            self.health.failed("stopping preempted requests", e)
        meta = KvpilotConnectorMetadata(
            loads=self._loads,
            refused=self._refusals,
            preempted=self._stopped,
            idle=not getattr(out, "total_num_scheduled_tokens", 1),
        )
        self._loads, self._refusals, self._stopped = [], {}, []
        try:
            for new in out.scheduled_new_reqs:
                self._plan_save(meta, out, new.req_id, new.num_computed_tokens, new.block_ids[0])
            cached = out.scheduled_cached_reqs
            for i, rid in enumerate(cached.req_ids):
                self._plan_save(meta, out, rid, cached.num_computed_tokens[i], None)
        except Exception as e:
            self.health.failed("planning saves", e)
        return meta

    def _plan_save(
        self,
        meta: KvpilotConnectorMetadata,
        out: SchedulerOutput,
        rid: str,
        computed: int,
        block_ids: list[int] | None,
    ) -> None:
        st = self.requests.get(rid)
        if st is None:
            return
        st.scheduled = True
        if not st.kv_id or not st.saving or st.refused or not self.saves:
            return
        end = min(computed + out.num_scheduled_tokens.get(rid, 0), len(st.prompt)) // self.page
        if end <= st.saved_pages or not self.health.usable():
            # Pages skipped while the host is away stay in vLLM's blocks and
            # are saved by a later step of the request.
            return
        if st.registration_id != self.client.registration.id:
            st.saving = False
            return
        if block_ids is None:
            block_ids = self._block_ids(out, rid)
        if block_ids is None or len(block_ids) < end:
            return
        # A request that pins its pages is saved before its step ends: its
        # Finish pins what is committed by then.
        background = st.params.cache_control is None
        meta.saves.append(
            PageSave(
                req_id=rid,
                kv_request_id=st.kv_id,
                registration_id=st.registration_id,
                tokens=st.prompt[: end * self.page],
                matched_slots=st.slots[: st.matched_pages],
                first_page=st.saved_pages,
                end_page=end,
                block_ids=list(block_ids[st.saved_pages : end]),
                background=background,
            )
        )
        if background:
            st.background_saves = True
            # Every tensor-parallel rank reports the save done (vLLM sums
            # the ranks' reports).
            self._inflight[st.kv_id] = self._inflight.get(st.kv_id, 0) + self.geo.parts
        self.counters["saved_pages"] += end - st.saved_pages
        st.saved_pages = end

    def _block_ids(self, out: SchedulerOutput, rid: str) -> list[int] | None:
        state = getattr(out, "kv_connector_block_state", None)
        if state is not None:
            ids = state.get_block_ids(rid)
            if ids:
                return list(ids[0])
        if self.kv_cache_manager is not None:
            return list(self.kv_cache_manager.get_block_ids(rid)[0])
        return None

    # -------------------------------------------------------------- finished

    def finished(self, request: Request) -> tuple[bool, dict[str, Any] | None]:
        """request_finished: Finish (or Release) the kvpilot request, now or
        once its background saves are done.

        Returns whether vLLM must keep the request's blocks until the worker
        names it in finished_sending (it had background saves), and what
        the request's output carries under
        ``kv_transfer_params["kvpilot"]``: ``cached_tokens`` (the prompt
        tokens it took from kvpilot), ``loaded_pages`` (the pages of them
        copied into vLLM's blocks), ``reloaded_pages`` (of those, pages
        kvpilot first brought back from its host, disk or remote tier),
        ``saved_pages`` (new prompt pages handed to kvpilot to keep),
        ``pinned_blocks`` and ``pin_error`` when it asked for a pin with
        cache_control; or ``error``, why its kv_transfer_params were refused.
        """
        st = self.requests.pop(request.request_id, None)
        if st is None:
            return False, None
        if st.refused:
            return False, {"error": st.refused}
        hold = st.background_saves
        if hold:
            self._held.add(st.req_id)
        info: dict[str, Any] = {
            "cached_tokens": st.external_tokens,
            "loaded_pages": -(-st.external_tokens // self.page),
            "reloaded_pages": min(st.reloaded_pages, -(-st.external_tokens // self.page)),
            "saved_pages": max(st.saved_pages - st.matched_pages, 0),
        }
        try:
            from vllm.v1.request import RequestStatus

            aborted = request.status == RequestStatus.FINISHED_ABORTED
            if not aborted and st.scheduled:
                self._commit_matched_for_pin(st)
            result = self._end(
                st,
                finish=not aborted and st.scheduled,
                usage=Usage(
                    input_tokens=request.num_prompt_tokens,
                    cached_tokens=st.external_tokens,
                    output_tokens=request.num_output_tokens,
                ),
            )
            if result is not None and st.params.cache_control is not None:
                info["pinned_blocks"] = result.pinned_blocks
                if result.pin_error is not None:
                    info["pin_error"] = str(result.pin_error)
        except Exception as e:
            self.health.failed("finishing a request", e)
        return hold, info

    def _commit_matched_for_pin(self, st: RequestState) -> None:
        """A request that pins with cache_control and saved nothing commits
        the pages it matched (their slots passed back), so its Finish pins
        them: the host pins what the request committed.
        """
        if (
            st.params.cache_control is None
            or not st.kv_id
            or st.matched_pages == 0
            or st.saved_pages != st.matched_pages
            or st.registration_id != self.client.registration.id
            or not self.health.usable()
        ):
            return
        n = st.matched_pages
        try:
            self.client.commit(
                st.kv_id, st.prompt[: n * self.page], st.slots[:n], timeout=self.settings.timeout_s
            )
        except Exception as e:
            self.health.failed("committing matched pages to pin them", e)

    def _stop(self, st: RequestState) -> None:
        """A preempted request: the worker stops its background saves
        before the step's forward, and its kvpilot request is released.
        """
        if st.background_saves:
            self._stopped.append(st.req_id)
        self._end(st, finish=False)

    def _end(self, st: RequestState, *, finish: bool, usage: Usage | None = None) -> Any:
        """Releases or finishes st's kvpilot request and forgets st; waits
        for the request's background saves first (None then).
        """
        self.requests.pop(st.req_id, None)
        if not st.kv_id or st.registration_id != self.client.registration.id:
            return None
        kv_id, st.kv_id = st.kv_id, ""
        end = _End(st.registration_id, finish, usage, st.params.cache_control)
        if self._inflight.get(kv_id):
            self._ending[kv_id] = end
            return None
        return self._call_end(kv_id, end)

    def _call_end(self, kv_id: str, end: _End) -> Any:
        """Ends kv_id on the ends thread; now (returning the FinishResult)
        when it pins with cache_control.
        """
        if end.cache_control is not None:
            return self._end_now(kv_id, end)
        self._ends.then(lambda: self._end_now(kv_id, end))
        return None

    def _end_now(self, kv_id: str, end: _End) -> Any:
        if end.registration_id != self.client.registration.id or not self.health.usable():
            return None  # the host releases it when it idles out
        r: FinishResult | int
        try:
            if end.finish:
                r = self.client.finish(
                    kv_id,
                    usage=end.usage,
                    cache_control=end.cache_control,
                    timeout=self.settings.timeout_s,
                )
            else:
                r = self.client.release(kv_id, timeout=self.settings.timeout_s)
        except Exception as e:
            self.health.failed("Finish" if end.finish else "Release", e)
            return None
        self.health.ok()
        return r

    # ------------------------------------------------------ worker reports

    def saves_done(self, output: Any) -> None:
        """update_connector_output: the worker's finished background saves
        (ending the kvpilot requests that waited for them) and the held
        requests vLLM freed.
        """
        meta = getattr(output, "kv_connector_worker_meta", None)
        try:
            if isinstance(meta, KvpilotWorkerMetadata):
                for kv_id, n in meta.done.items():
                    left = self._inflight.get(kv_id, 0) - n
                    if left > 0:
                        self._inflight[kv_id] = left
                        continue
                    self._inflight.pop(kv_id, None)
                    end = self._ending.pop(kv_id, None)
                    if end is not None:
                        self._call_end(kv_id, end)
        except Exception as e:
            self.health.failed("ending requests after their saves", e)
        self._held -= set(getattr(output, "finished_sending", None) or ())

    def waiting_on_worker(self) -> bool:
        """has_pending_push_work: ends or block frees wait for the worker's
        reports, so vLLM must keep stepping.
        """
        return bool(self._ending or self._held)

    def _reregistered(self, reg: Registration) -> None:
        # The host restarted: its requests and slots are gone. Requests
        # holding the old registration id skip kvpilot from here on.
        self.log.info(
            "kvpilot connector (scheduler): the kvpilot host restarted; registered again as %s",
            reg.id,
        )

    def take_events(self) -> list[Any]:
        """take_events: kvpilot's stores and drops as vLLM KV events."""
        return self.events.take() if self.events is not None else []

    def drain(self, timeout: float) -> bool:
        """Waits until the queued Finish and Release calls ran; False at
        timeout.
        """
        return self._ends.drain(timeout)

    def close(self) -> None:
        """Lets the queued ends run (up to the call timeout), then closes
        the connection to the host.
        """
        self._ends.close(self.settings.timeout_s)
        if self.events is not None:
            self.events.close()
        self.client.close()


def _kv_request_id(rid: str, seq: int) -> str:
    """The kvpilot request id of vLLM request rid's seq-th match.

    Unique among running requests (a preempted request matches again under
    a new one) and within the host's limit: 256 printable ASCII characters.
    """
    name = "".join(c if " " <= c <= "~" else "?" for c in rid[:200])
    return f"{name}#{seq}"
