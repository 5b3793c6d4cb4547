"""The Python client of kvpilot.v1.Engine (Go: sdk/engineclient).

An inference engine uses it to keep its KV cache in a kvpilot host's pools.
Constructing an EngineClient connects to the host's engine socket and
registers the engine's layout; the host answers with its pools, whose memfd
descriptors the client claims over the descriptor socket and maps, so the
engine reads and writes KV bytes in place (``client.device``,
``client.host``). Then, per request::

    with EngineClient(sock, layout) as c:
        m = c.match(prompt, session="s")
        a = c.allocate(m.request_id, pages_to_prefill)
        # write K/V of the uncached tokens into c.device at a.page_slots
        c.commit(m.request_id, prompt, (m.page_slots + a.page_slots)[:full_pages])
        c.finish(m.request_id, cache_control={"type": "ephemeral", "ttl": "5m"})

When the host restarts, the engine's next call finds its registration
unknown: the client registers again (new pools, new mappings; the old ones
stay mapped until close, so no view the engine holds is pulled out from
under it), retries a ``match`` transparently, and raises ``HostRestarted``
from calls about a request that started before: run it again from its
match. ``run_request`` does that, and waits out a host that is briefly down.
Errors are ``kvpilot.errors.KvpilotError`` subclasses, never raw gRPC ones.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import grpc
import numpy as np

from kvpilot.arena import Arena, ArenaError
from kvpilot.engine_types import (
    FEATURE_COMMIT_FIRST_PAGE,
    FEATURE_COMMIT_PARTS,
    MODE_ARENA,
    MODE_CONNECTOR,
    AllocateResult,
    CacheControl,
    ChatMessage,
    CommitResult,
    FillOrder,
    FinishResult,
    MatchResult,
    RecomputeCandidates,
    Registration,
    Usage,
)
from kvpilot.errors import (
    DeadlineExceeded,
    HostRestarted,
    InvalidLayout,
    KvpilotError,
    NotSupportedYet,
    Unavailable,
    UnknownRegistration,
    UnknownRequest,
    from_proto,
    from_rpc_error,
    is_transient,
)
from kvpilot.fdclaim import FDProtocolError, claim_fds
from kvpilot.layout import Layout, RopeConfig
from kvpilot.unixsock import socket_problem
from kvpilot.v1 import common_pb2, engine_pb2, engine_pb2_grpc

__all__ = [
    "API_VERSION",
    "AllocateResult",
    "CacheControl",
    "ChatMessage",
    "CommitResult",
    "EngineClient",
    "FillOrder",
    "RecomputeCandidates",
    "FinishResult",
    "MatchResult",
    "Registration",
    "Usage",
]

#: The protocol version this client speaks.
API_VERSION = engine_pb2.ENGINE_API_VERSION_1

T = TypeVar("T")

_MODES = {
    MODE_ARENA: engine_pb2.ENGINE_MODE_ARENA,
    MODE_CONNECTOR: engine_pb2.ENGINE_MODE_CONNECTOR,
}
_MODE_NAMES = {
    engine_pb2.ENGINE_MODE_UNSPECIFIED: MODE_ARENA,
    engine_pb2.ENGINE_MODE_ARENA: MODE_ARENA,
    engine_pb2.ENGINE_MODE_CONNECTOR: MODE_CONNECTOR,
}
_TIERS = {common_pb2.TIER_DEVICE: "device", common_pb2.TIER_HOST: "host"}

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
    # Reconnect fast to a restarting host (Go: 20 ms base, 1 s cap).
    ("grpc.initial_reconnect_backoff_ms", 20),
    ("grpc.min_reconnect_backoff_ms", 20),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def _u32s(values: Iterable[int] | np.ndarray) -> list[int]:
    # Fast for long prompts; values outside uint32 raise ValueError.
    arr = values if isinstance(values, np.ndarray) else np.fromiter(values, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
        raise ValueError("tokens and slots must be unsigned 32-bit integers")
    return arr.astype(np.uint32).reshape(-1).tolist()


class EngineClient:
    """A registered engine's connection to a kvpilot host; thread-safe.

    Args:
        socket: the host's engine socket (``<data_dir>/run/engine.sock`` by
            default; relative paths are resolved now).
        layout: the engine's KV layout (validated before connecting).
        rope: the model's rotary embedding; sent when the layout has a RoPE
            slice (default base 10000, no scaling).
        engine_id: names this engine in the host's logs and audit log; in
            connector mode, processes of one engine share it.
        mode: ``"arena"`` (the engine computes in the host's device arena)
            or ``"connector"`` (the engine keeps its own device memory; the
            device arena is a staging area it copies pages through).
        reset_cache: forget every cached page at registration (needed to
            register a layout other than the one the host holds pages for).
        timeout: seconds each call may take, waiting for a restarting host
            included.
        on_reregister: called with the new Registration after the client
            registered again because the host restarted; the engine drops
            whatever it kept about slots.
        recompute: the engine serves sparse fill orders and ranks a splice's
            kept tokens for recompute (``FillOrder.positions`` and
            ``candidates``); a host configured to recompute refuses an
            engine without it.
        parts: how many processes write each page, each its slice (a
            tensor-parallel connector engine's ranks; every process of the
            engine passes the same count): their saves go through
            ``allocate(part=)`` and ``commit(part=)``, and a page is cached
            once every part committed it. 0 or 1: whole pages.
        logger: where to log (default ``logging.getLogger("kvpilot.engine")``).

    Raises KvpilotError subclasses: ``InvalidLayout`` for a bad layout,
    ``Unavailable`` when no host serves the socket (the detail says what to
    do), ``LayoutConflict`` when the host holds pages of another layout.
    """

    def __init__(
        self,
        socket: str,
        layout: Layout,
        rope: RopeConfig | None = None,
        *,
        engine_id: str = "",
        mode: str = MODE_ARENA,
        reset_cache: bool = False,
        timeout: float = 10.0,
        on_reregister: Callable[[Registration], None] | None = None,
        recompute: bool = False,
        parts: int = 0,
        logger: logging.Logger | None = None,
    ) -> None:
        layout.validate()
        if mode not in _MODES:
            raise ValueError(f"mode {mode!r}: want 'arena' or 'connector'")
        self.socket = os.path.abspath(socket)
        self.layout = layout
        self.rope = rope or RopeConfig()
        self.engine_id = engine_id
        self.mode = mode
        self.timeout = timeout
        self.on_reregister = on_reregister
        self.recompute = recompute
        self.parts = parts
        self.log = logger or logging.getLogger("kvpilot.engine")
        self._reset_cache = reset_cache

        self._reg_lock = threading.Lock()
        self._lock = threading.Lock()
        self._closed = False
        self._closing = threading.Event()
        self._reg: Registration | None = None
        self._device: Arena | None = None
        self._host: Arena | None = None
        self._retired: list[Arena] = []
        self._streams: set[grpc.Future] = set()

        # "unix:" + an absolute path; "unix://" would read the first element
        # of a relative path as an authority.
        self._channel = grpc.insecure_channel("unix:" + self.socket, options=_CHANNEL_OPTIONS)
        self._stub = engine_pb2_grpc.EngineStub(self._channel)
        try:
            self._register(0, timeout)
        except BaseException:
            self._channel.close()
            raise

    # ------------------------------------------------------------------ state

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        reg = self._reg
        return f"EngineClient(socket={self.socket!r}, registration={reg.id if reg else None!r})"

    @property
    def registration(self) -> Registration:
        """The live registration."""
        reg = self._reg
        assert reg is not None
        return reg

    @property
    def device(self) -> Arena:
        """The device arena of the live registration. After a re-registration
        it is a new Arena: fetch it again rather than keeping it.
        """
        dev = self._device
        assert dev is not None
        return dev

    @property
    def host(self) -> Arena | None:
        """The host-tier arena (None when the host has none)."""
        return self._host

    @property
    def closed(self) -> bool:
        """Whether close() ran."""
        return self._closed

    def close(self) -> None:
        """Ends fill-order streams, closes the connection and unmaps every
        arena (mappings still viewed by numpy arrays or tensors are released
        with their last view). The host releases the engine's requests when
        it registers again or they idle out.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing.set()
            streams, self._streams = list(self._streams), set()
            arenas = [*self._retired, self._device, self._host]
            self._retired = []
        for call in streams:
            call.cancel()
        self._channel.close()
        for a in arenas:
            if a is not None:
                a.close()

    # ----------------------------------------------------------- registration

    def _register_request(self, reset: bool) -> engine_pb2.RegisterRequest:
        lay = self.layout
        req = engine_pb2.RegisterRequest(
            api_version=API_VERSION,
            engine_id=self.engine_id,
            model=lay.model,
            page_size=lay.page_size,
            dtype=lay.dtype,
            layers=lay.layers,
            reset_cache=reset,
            mode=_MODES[self.mode],
            recompute=self.recompute,
            parts=self.parts,
            buffers=[
                engine_pb2.KVBuffer(name=b.name, heads=b.heads, head_dim=b.head_dim)
                for b in lay.buffers
            ],
        )
        if lay.rope is not None:
            r = lay.rope
            req.rope_slice.CopyFrom(
                engine_pb2.RopeSlice(buffer=r.buffer, offset=r.offset, dim=r.dim, style=r.style)
            )
            s = self.rope.scaling
            req.rope.CopyFrom(
                engine_pb2.RopeConfig(
                    base=self.rope.base,
                    scaling=engine_pb2.RopeScaling(
                        type=s.type,
                        factor=s.factor,
                        original_max_position=s.original_max_position,
                        low_freq_factor=s.low_freq_factor,
                        high_freq_factor=s.high_freq_factor,
                        beta_fast=s.beta_fast,
                        beta_slow=s.beta_slow,
                        mscale=s.mscale,
                        mscale_all_dim=s.mscale_all_dim,
                        attention_factor=s.attention_factor,
                        no_truncate=s.no_truncate,
                    ),
                )
            )
        return req

    def _register(self, seen: int, timeout: float | None) -> bool:
        """Registers (again) unless another thread already did since
        generation ``seen``; returns whether this call registered.

        Registrations are serialized by ``_reg_lock`` (held across the RPC);
        the short ``_lock`` guards the state close() reads, so closing never
        waits for a registration stuck on a host that is down.
        """
        with self._reg_lock:
            if self._closed:
                raise Unavailable("engine client closed")
            current = self._reg.generation if self._reg else 0
            if current != seen:
                return False
            # A reset is asked for once, at construction.
            req = self._register_request(self._reset_cache and seen == 0)
            try:
                resp = self._stub.Register(req, timeout=timeout, wait_for_ready=True)
            except grpc.RpcError as e:
                raise self._error(e) from None
            reg = Registration(
                id=resp.registration_id,
                boot_id=resp.boot_id,
                worker_id=resp.worker_id,
                fingerprint=resp.layout_fingerprint,
                page_size=resp.page_size,
                page_bytes=resp.page_bytes,
                reattached=resp.reattached,
                joined=resp.joined,
                cached_pages=resp.cached_pages,
                generation=seen + 1,
                mode=_MODE_NAMES.get(resp.mode, MODE_ARENA),
                features=tuple(resp.features),
            )
            if reg.page_size != self.layout.page_size or reg.page_bytes != self.layout.page_bytes():
                raise InvalidLayout(
                    f"host answered page size {reg.page_size} and {reg.page_bytes}-byte pages; "
                    f"this engine's layout has {self.layout.page_size} and "
                    f"{self.layout.page_bytes()}"
                )
            arenas = self._open_arenas(resp, timeout)
            with self._lock:
                if self._closed or "device" not in arenas:
                    for a in arenas.values():
                        a.close()
                    raise Unavailable(
                        "engine client closed"
                        if self._closed
                        else "the host offered no device arena"
                    )
                self._retired += [a for a in (self._device, self._host) if a is not None]
                self._device, self._host = arenas["device"], arenas.get("host")
                previous, self._reg = self._reg, reg
            if previous is not None and previous.boot_id != reg.boot_id:
                self.log.info(
                    "host restarted; registered again (boot_id=%s registration=%s)",
                    reg.boot_id,
                    reg.id,
                )
            return True

    def _reregister(self, seen: int, timeout: float | None) -> None:
        """Registers again after an unknown_registration under generation
        ``seen``, and tells the engine (once per new registration).
        """
        if self._register(seen, timeout) and self.on_reregister is not None:
            self.on_reregister(self.registration)

    def _open_arenas(
        self, resp: engine_pb2.RegisterResponse, timeout: float | None
    ) -> dict[str, Arena]:
        arenas: dict[str, Arena] = {}
        memfds: list[Arena] = []
        for h in resp.pools:
            tier = _TIERS.get(h.tier)
            if tier is None:
                raise Unavailable(f"host offered a pool on tier {h.tier}")
            try:
                a = Arena(
                    tier=tier,
                    kind=h.kind,
                    slots=h.slots,
                    arrangement=h.arrangement,
                    size_bytes=h.size_bytes,
                    layout=self.layout,
                    pinned=h.pinned,
                    staging=h.staging,
                    cuda_ipc=h.cuda_ipc,
                    device_ordinal=h.device_ordinal,
                )
            except ArenaError as e:
                raise Unavailable(str(e)) from None
            if h.kind == "memfd":
                memfds.append(a)
            elif h.kind != "cuda_ipc":
                raise Unavailable(f"{tier} arena: unknown kind {h.kind!r}")
            arenas[tier] = a
        if not memfds:
            return arenas
        try:
            fds = claim_fds(resp.fd_socket, resp.fd_token, len(memfds), timeout or 10.0)
        except (OSError, FDProtocolError) as e:
            raise Unavailable(f"claiming the pools' descriptors: {e}") from None
        try:
            for i, a in enumerate(memfds):
                try:
                    a.map_fd(fds[i])
                except (OSError, ArenaError) as e:
                    for m in memfds[:i]:
                        m.close()
                    raise Unavailable(f"mapping the {a.tier} arena: {e}") from None
        finally:
            for fd in fds:
                os.close(fd)  # the mappings keep the memory
        return arenas

    # ------------------------------------------------------------------ calls

    def _error(self, err: grpc.RpcError) -> KvpilotError:
        """Converts a gRPC error; a host that is not there at all reads as
        Unavailable naming the socket and what to do.
        """
        e = from_rpc_error(err)
        if isinstance(e, (Unavailable, DeadlineExceeded)):
            why = socket_problem(self.socket)
            if why is not None:
                out = Unavailable(
                    f"no kvpilot host at engine socket {self.socket}: {why}; start `kvpilot serve` "
                    "(it logs the socket it serves, <data_dir>/run/engine.sock by default) or "
                    "pass that path"
                )
                out.__cause__ = err
                return out
        return e

    def _call(
        self,
        rpc: Callable[..., T],
        build: Callable[[str], Any],
        *,
        retry: bool,
        timeout: float | None,
        registration_id: str = "",
    ) -> T:
        """Runs rpc with the live registration id. If the host does not know
        the registration (it restarted), the client registers again; the
        call is then retried when ``retry`` is set, else HostRestarted.

        ``registration_id``, when set, is the registration the call's slots
        and request belong to: if it is no longer the live one, the call is
        not sent (HostRestarted), so no slot of an old registration ever
        reaches the new one, where the same number names another page.
        """
        t = self.timeout if timeout is None else timeout
        reg = self.registration
        if self._closed:
            raise Unavailable("engine client closed")
        if registration_id and registration_id != reg.id:
            raise HostRestarted(
                f"registration {registration_id} ended (the host restarted; this engine is "
                f"registered as {reg.id} now), so its slots and requests are gone"
            )
        try:
            return rpc(build(reg.id), timeout=t, wait_for_ready=True)
        except grpc.RpcError as e:
            err = self._error(e)
        if self._closed:
            raise Unavailable("engine client closed") from None
        if not isinstance(err, UnknownRegistration):
            raise err
        try:
            self._reregister(reg.generation, t)
        except KvpilotError as rerr:
            err.detail += f" (and registering again failed: {rerr})"
            raise err from None
        if not retry:
            raise HostRestarted(str(err.detail)) from None
        try:
            return rpc(build(self.registration.id), timeout=t, wait_for_ready=True)
        except grpc.RpcError as e:
            raise self._error(e) from None

    def match(
        self,
        tokens: Sequence[int] | np.ndarray,
        *,
        session: str = "",
        tenant: str = "",
        messages: Sequence[ChatMessage | dict[str, Any]] | None = None,
        request_id: str = "",
        load_back_deadline_ms: int = 0,
        timeout: float | None = None,
    ) -> MatchResult:
        """Starts a request: finds the prompt's cached prefix, loading pages
        back from colder tiers, and locks it for the request.

        ``messages`` (ChatMessage or dicts of its fields) let the host and
        policies reason about turns. A host restart is retried transparently.
        """
        base = engine_pb2.MatchRequest(
            request_id=request_id,
            session=session,
            tenant=tenant,
            tokens=_u32s(tokens),
            messages=[_message_to_proto(m) for m in messages or ()],
            load_back_deadline_ms=load_back_deadline_ms,
        )
        gen = 0

        def build(reg: str) -> engine_pb2.MatchRequest:
            nonlocal gen
            gen = self.registration.generation
            base.registration_id = reg
            return base

        r = self._call(self._stub.Match, build, retry=True, timeout=timeout)
        return MatchResult(
            request_id=r.request_id,
            cached_tokens=r.cached_tokens,
            page_slots=list(r.page_slots),
            block_hashes=list(r.block_hashes),
            loaded_pages=r.loaded_pages,
            loaded_bytes=r.loaded_bytes,
            load_back_us=r.load_back_us,
            load_back_incomplete=r.load_back_incomplete,
            dropped_pages=r.dropped_pages,
            page_size=r.page_size or self.layout.page_size,
            generation=gen,
        )

    def allocate(
        self,
        request_id: str,
        pages: int,
        *,
        timeout: float | None = None,
        registration_id: str = "",
        part: int = 0,
        first_page: int = 0,
    ) -> AllocateResult:
        """Device page slots for the request's prefill; the host evicts per
        its plan when the device is full. ``registration_id``: the
        registration the request was matched under (HostRestarted, without
        a call, when it is no longer the live one).

        ``part`` (1..parts, with ``first_page``): the slots of the save of
        pages from ``first_page``, the same for every part that asks (the
        first to ask allocates them).
        """
        if part:
            self._need(FEATURE_COMMIT_PARTS, f"allocate for part {part}")
        r = self._call(
            self._stub.Allocate,
            lambda reg: engine_pb2.AllocateRequest(
                registration_id=reg,
                request_id=request_id,
                pages=pages,
                part=part,
                first_page=first_page,
            ),
            retry=False,
            timeout=timeout,
            registration_id=registration_id,
        )
        return AllocateResult(page_slots=list(r.page_slots), evicted_pages=r.evicted_pages)

    def commit(
        self,
        request_id: str,
        tokens: Sequence[int] | np.ndarray,
        page_slots: Sequence[int],
        *,
        first_page: int = 0,
        timeout: float | None = None,
        registration_id: str = "",
        part: int = 0,
    ) -> CommitResult:
        """Records full pages ``[first_page, first_page + len(page_slots))``
        of ``tokens`` (the whole sequence from position 0) as written into
        ``page_slots``: they enter the cache and are written through.

        ``first_page`` > 0: the pages before it are ones this request
        matched or committed earlier, named by their tokens alone (a prompt
        saved in several commits sends each commit's new pages only).
        ``registration_id``: as for ``allocate``. ``part`` (1..parts): this
        process's slice of pages allocated with ``allocate(part=)``; they
        are cached when the last part commits them (``parts_waiting``
        counts the parts still to commit).
        """
        if first_page > 0 and FEATURE_COMMIT_FIRST_PAGE not in self.registration.features:
            # An older host would read the slots as from the root.
            raise NotSupportedYet(
                f"commit from page {first_page}: the host does not announce "
                f"{FEATURE_COMMIT_FIRST_PAGE}; commit every page's slot from the root"
            )
        if part:
            self._need(FEATURE_COMMIT_PARTS, f"commit for part {part}")
        toks, slots = _u32s(tokens), _u32s(page_slots)
        r = self._call(
            self._stub.Commit,
            lambda reg: engine_pb2.CommitRequest(
                registration_id=reg,
                request_id=request_id,
                tokens=toks,
                page_slots=slots,
                first_page=first_page,
                part=part,
            ),
            retry=False,
            timeout=timeout,
            registration_id=registration_id,
        )
        return CommitResult(
            stored=r.stored,
            present=r.present,
            block_hashes=list(r.block_hashes),
            parts_waiting=r.parts_waiting,
        )

    def _need(self, feature: str, what: str) -> None:
        """Raises NotSupportedYet when the host did not announce feature (an
        older host ignores fields it does not know).
        """
        if feature not in self.registration.features:
            raise NotSupportedYet(
                f"{what}: the host does not announce {feature}; upgrade the kvpilot host"
            )

    def ensure_registered(self, *, timeout: float | None = None) -> Registration:
        """Makes sure this client's registration is live on the host, and
        registers again when the host restarted; returns the registration.

        Another process of a connector-mode engine may have registered with
        a restarted host first: this brings this process onto the same
        registration before it uses slots that process handed it. The host
        has no call for the question alone, so it asks about a request no
        one runs: unknown_request means the registration is live.
        """
        with contextlib.suppress(UnknownRequest, HostRestarted):
            self.release(_PROBE_REQUEST, timeout=timeout)
        return self.registration

    def release(self, request_id: str, *, timeout: float | None = None) -> int:
        """Ends a request; returns the unused slots the host freed."""
        r = self._call(
            self._stub.Release,
            lambda reg: engine_pb2.ReleaseRequest(registration_id=reg, request_id=request_id),
            retry=False,
            timeout=timeout,
        )
        return int(r.freed_slots)

    def finish(
        self,
        request_id: str,
        *,
        usage: Usage | None = None,
        cache_control: CacheControl | dict[str, Any] | str | None = None,
        timeout: float | None = None,
    ) -> FinishResult:
        """Ends the request with its usage; an ephemeral ``cache_control``
        pins its cached prefix for the TTL.

        ``cache_control`` is a CacheControl, or a request body's JSON (dict
        or string) in the Anthropic form ``{"cache_control": {...}}``, the
        nvext form ``{"nvext": {"cache_control": {...}}}``, or the bare
        ``{"type": "ephemeral", "ttl": "5m"}``. A failed pin does not fail
        the finish: it is in ``pin_error``.
        """
        u = usage or Usage()
        req = engine_pb2.FinishRequest(
            request_id=request_id,
            usage=engine_pb2.Usage(
                input_tokens=u.input_tokens,
                cached_tokens=u.cached_tokens,
                output_tokens=u.output_tokens,
                reasoning_tokens=u.reasoning_tokens,
            ),
        )
        if isinstance(cache_control, CacheControl):
            if cache_control.type:
                req.cache_control.CopyFrom(
                    engine_pb2.CacheControl(type=cache_control.type, ttl=cache_control.ttl_string())
                )
        elif isinstance(cache_control, dict):
            req.cache_control_json = json.dumps(cache_control)
        elif isinstance(cache_control, str):
            req.cache_control_json = cache_control

        def build(reg: str) -> engine_pb2.FinishRequest:
            req.registration_id = reg
            return req

        r = self._call(self._stub.Finish, build, retry=False, timeout=timeout)
        return FinishResult(
            freed_slots=r.freed_slots,
            pinned=r.pinned,
            pinned_blocks=r.pinned_blocks,
            total_blocks=r.total_blocks,
            ttl_ms=r.ttl_ms,
            pin_error=from_proto(r.pin_error) if r.HasField("pin_error") else None,
        )

    def complete_fill(
        self,
        order_id: str,
        ok: bool = True,
        error: str = "",
        *,
        recomputed: int = 0,
        estimated_kl: float = 0.0,
        timeout: float | None = None,
    ) -> None:
        """Reports a fill order's outcome: its tokens were written (ok), or
        why not; ``recomputed`` kept tokens were prefilled again, and the
        quality guard estimated ``estimated_kl`` left.
        """
        self._call(
            self._stub.CompleteFill,
            lambda reg: engine_pb2.CompleteFillRequest(
                registration_id=reg,
                order_id=order_id,
                ok=ok,
                error=error,
                recomputed=recomputed,
                estimated_kl=estimated_kl,
            ),
            retry=False,
            timeout=timeout,
        )

    def fill_orders(self) -> Iterator[FillOrder]:
        """The host's fill orders (splice replacements to prefill), as they
        come; answer each with ``complete_fill``.

        Blocks between orders. Across a host restart it registers again and
        resubscribes. It ends when the client closes (call ``close`` from
        another thread to stop a consumer blocked here).
        """
        while not self._closed:
            reg = self.registration
            call = self._stub.FillOrders(
                engine_pb2.FillOrdersRequest(registration_id=reg.id), wait_for_ready=True
            )
            with self._lock:
                if self._closed:
                    call.cancel()
                    return
                self._streams.add(call)
            try:
                for o in call:
                    yield FillOrder(
                        order_id=o.order_id,
                        session=o.session,
                        tenant=o.tenant,
                        position=o.position,
                        tokens=list(o.tokens),
                        page_slots=list(o.page_slots),
                        first_offset=o.first_offset,
                        prefix_page_slots=list(o.prefix_page_slots),
                        positions=list(o.positions),
                        candidates=RecomputeCandidates(
                            positions=list(o.candidates.positions),
                            tokens=list(o.candidates.tokens),
                            share=o.candidates.share,
                            max_kl=o.candidates.max_kl,
                            region=o.candidates.region,
                            echo=list(o.candidates.echo),
                        )
                        if o.HasField("candidates")
                        else None,
                    )
            except grpc.RpcError as e:
                if self._closed:
                    return
                err = from_rpc_error(e)
                if isinstance(err, UnknownRegistration):
                    self._reregister(reg.generation, self.timeout)
                elif not isinstance(err, (Unavailable, DeadlineExceeded)):
                    raise err from None
            finally:
                call.cancel()
                with self._lock:
                    self._streams.discard(call)
            self._closing.wait(0.05)

    def run_request(
        self,
        fn: Callable[[EngineClient], T],
        *,
        attempts: int = 5,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
    ) -> T:
        """Runs ``fn(self)``, a whole request from its match, and runs it
        again from the start when the host restarted during it
        (HostRestarted) or was briefly unavailable, waiting ``backoff``
        seconds, doubling up to ``max_backoff``, at most ``attempts`` times.

        This is how a host restart never kills the engine: the client
        registers again on the next call, and ``fn`` must fetch
        ``client.device`` afresh (not keep an arena from an earlier run).
        Other errors, and the last transient one, are raised.
        """
        delay = backoff
        for attempt in range(1, attempts + 1):
            try:
                return fn(self)
            except KvpilotError as e:
                if not is_transient(e) or attempt == attempts or self._closed:
                    raise
                self.log.info(
                    "request failed (%s); running it again in %.2fs (attempt %d of %d)",
                    e.code,
                    delay,
                    attempt + 1,
                    attempts,
                )
            if self._closing.wait(delay):
                raise Unavailable("engine client closed")
            delay = min(delay * 2, max_backoff)
        raise AssertionError("unreachable")


# A request id the host never hands out (its ids are hex), for
# ensure_registered's liveness question.
_PROBE_REQUEST = "kvpilot-registration-probe"


def _message_to_proto(m: ChatMessage | dict[str, Any]) -> engine_pb2.ChatMessage:
    if isinstance(m, dict):
        m = ChatMessage(**m)
    return engine_pb2.ChatMessage(
        role=m.role,
        tool_name=m.tool_name,
        content=m.content,
        thinking_text=m.thinking_text,
        span=engine_pb2.TokenSpan(start=m.span[0], end=m.span[1]),
        thinking=[engine_pb2.TokenSpan(start=s, end=e) for s, e in m.thinking],
    )
