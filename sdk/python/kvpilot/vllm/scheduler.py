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
   pages this step, allocate staging slots and plan a save: the worker
   copies the pages out after the forward and commits them.
4. ``finished`` (request_finished): Finish with the request's usage and
   cache_control (Release when it was aborted or never ran).

A preempted request releases its kvpilot request and starts over with a new
match when vLLM schedules it again. Anything kvpilot raises leaves the
request without kvpilot (kvpilot.hosthealth); the scheduler never fails
because of the host.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvpilot.engine_types import Registration, Usage
from kvpilot.vllm.geometry import check_parallelism, engine_id, geometry
from kvpilot.vllm.health import HostHealth, host_down
from kvpilot.vllm.hostlink import connect
from kvpilot.vllm.metadata import KvpilotConnectorMetadata, PageLoad, PageSave
from kvpilot.vllm.params import RequestParams, RequestParamsError
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
    #: Staging slot of each prompt page from the root: matched, then allocated.
    slots: list[int] = field(default_factory=list)
    matched_pages: int = 0
    #: Matched pages vLLM may take: never the one holding the last token.
    usable_pages: int = 0
    loaded_pages: int = 0
    #: Pages [0, saved_pages) are in kvpilot or planned to be saved.
    saved_pages: int = 0
    #: vLLM's own (block-aligned) prefix hit at the latest lookup.
    local_tokens: int = 0
    external_tokens: int = 0
    scheduled: bool = False
    saving: bool = True


class SchedulerSide:
    """The scheduler-side connector's state and calls to the host."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        kv_cache_config: KVCacheConfig,
        settings: ConnectorSettings,
        log: logging.Logger,
    ) -> None:
        check_parallelism(vllm_config)
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
        self._seq = itertools.count()
        self.kv_cache_manager: KVCacheManager | None = None
        #: Counters since start (tokens vLLM took from kvpilot, pages loaded
        #: back from colder tiers, pages planned to be saved, refusals).
        self.counters = {"hit_tokens": 0, "loaded_pages": 0, "saved_pages": 0, "refused": 0}

    # ---------------------------------------------------------------- lookup

    def lookup(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        """get_num_new_matched_tokens: kvpilot's tokens beyond vLLM's own hit."""
        try:
            st = self.requests.get(request.request_id)
            if st is not None and st.scheduled:
                # Preempted and scheduled again: start over from a new match.
                self._end(st, finish=False)
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
            st.params = RequestParams.parse(request.kv_transfer_params)
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
                request_id=kv_id,
                load_back_deadline_ms=self.settings.load_back_deadline_ms,
                timeout=self.settings.timeout_s,
            )
        except Exception as e:
            self.health.failed("Match", e)
            return st
        self.health.ok()
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
        st.loaded_pages = m.loaded_pages
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
            self.counters["loaded_pages"] += st.loaded_pages
            self.log.debug(
                "kvpilot connector: request %s takes %d tokens from kvpilot (%d pages loaded "
                "back from colder tiers)",
                st.req_id,
                num_external_tokens,
                st.loaded_pages,
            )
        except Exception as e:
            self.health.failed("planning a load", e)

    # ------------------------------------------------------------ build_meta

    def build_meta(self, out: SchedulerOutput) -> KvpilotConnectorMetadata:
        """build_connector_meta: this step's loads, saves and refusals."""
        meta = KvpilotConnectorMetadata(loads=self._loads, refused=self._refusals)
        self._loads, self._refusals = [], {}
        try:
            for rid in out.preempted_req_ids or ():
                st = self.requests.get(rid)
                if st is not None and st.scheduled:
                    self._end(st, finish=False)
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
        need = end - len(st.slots)
        if need > 0:
            try:
                a = self.client.allocate(st.kv_id, need, timeout=self.settings.timeout_s)
            except Exception as e:
                self.health.failed("Allocate", e)
                if not host_down(e):
                    st.saving = False
                return
            self.health.ok()
            if len(a.page_slots) != need:
                st.saving = False
                return
            st.slots += a.page_slots
        if block_ids is None:
            block_ids = self._block_ids(out, rid)
        if block_ids is None or len(block_ids) < end:
            return
        meta.saves.append(
            PageSave(
                req_id=rid,
                kv_request_id=st.kv_id,
                registration_id=st.registration_id,
                tokens=st.prompt[: end * self.page],
                commit_slots=st.slots[:end],
                first_page=st.saved_pages,
                block_ids=list(block_ids[st.saved_pages : end]),
            )
        )
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

    def finished(self, request: Request) -> dict[str, Any] | None:
        """request_finished: Finish (or Release) the kvpilot request.

        Returns what the request's output carries under
        ``kv_transfer_params["kvpilot"]``: ``cached_tokens`` (the prompt
        tokens it took from kvpilot), ``loaded_pages`` (of those, pages the
        match loaded back from kvpilot's host, disk or remote tier),
        ``saved_pages`` (new prompt pages handed to kvpilot to keep),
        ``pinned_blocks`` and ``pin_error`` when it asked for a pin with
        cache_control; or ``error``, why its kv_transfer_params were refused.
        """
        st = self.requests.pop(request.request_id, None)
        if st is None:
            return None
        if st.refused:
            return {"error": st.refused}
        info: dict[str, Any] = {
            "cached_tokens": st.external_tokens,
            "loaded_pages": st.loaded_pages if st.external_tokens else 0,
            "saved_pages": max(st.saved_pages - st.matched_pages, 0),
        }
        try:
            from vllm.v1.request import RequestStatus

            aborted = request.status == RequestStatus.FINISHED_ABORTED
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
        return info

    def _end(self, st: RequestState, *, finish: bool, usage: Usage | None = None) -> Any:
        """Releases or finishes st's kvpilot request and forgets st."""
        self.requests.pop(st.req_id, None)
        if not st.kv_id or st.registration_id != self.client.registration.id:
            return None
        kv_id, st.kv_id = st.kv_id, ""
        if not self.health.usable():
            return None  # the host releases it when it idles out
        try:
            if finish:
                r = self.client.finish(
                    kv_id,
                    usage=usage,
                    cache_control=st.params.cache_control,
                    timeout=self.settings.timeout_s,
                )
            else:
                r = self.client.release(kv_id, timeout=self.settings.timeout_s)
        except Exception as e:
            self.health.failed("Finish" if finish else "Release", e)
            return None
        self.health.ok()
        return r

    def _reregistered(self, reg: Registration) -> None:
        # The host restarted: its requests and slots are gone. Requests
        # holding the old registration id skip kvpilot from here on.
        self.log.info(
            "kvpilot connector (scheduler): the kvpilot host restarted; registered again as %s",
            reg.id,
        )

    def close(self) -> None:
        """Closes the connection to the host."""
        self.client.close()


def _kv_request_id(rid: str, seq: int) -> str:
    """The kvpilot request id of vLLM request rid's seq-th match.

    Unique among running requests (a preempted request matches again under
    a new one) and within the host's limit: 256 printable ASCII characters.
    """
    name = "".join(c if " " <= c <= "~" else "?" for c in rid[:200])
    return f"{name}#{seq}"
