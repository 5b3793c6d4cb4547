"""The Python client of kvpilot.v1.Control (Go: sdk/controlclient, Unix socket).

Routers, harnesses and operators use it to apply directives, call the
router's cache_control API, read stats and watch KV events::

    from kvpilot import ControlClient, directives as d

    with ControlClient("kvpilot-data/run/control.sock") as ctl:
        ctl.apply([d.pin("chat-1", end=512, ttl="1h")], tenant="acme")
        ctl.cache_control("pin_prefix", token_ids=prompt, ttl_seconds=300)
        print(ctl.stats().tiers["device"].pinned_pages)

A turn is applied all or none. When the host refuses it, ``apply`` raises
the turn's KvpilotError with the per-directive results in ``e.result``
(``check=False`` returns the ApplyResult instead); transport failures raise
KvpilotError subclasses too (``Unavailable`` when no host serves the socket).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import grpc

from kvpilot.directives import hash_value, to_directive
from kvpilot.errors import InvalidTier, KvpilotError, Unavailable, from_proto, from_rpc_error
from kvpilot.ttl import TTLValue, from_duration, to_duration
from kvpilot.v1 import common_pb2, control_pb2, control_pb2_grpc, directive_pb2

__all__ = [
    "ApplyResult",
    "CacheControlResult",
    "ControlClient",
    "DirectiveResult",
    "Effect",
    "KVEvent",
    "Stats",
    "TierStats",
]

_TIER_NAMES = {
    common_pb2.TIER_DEVICE: "device",
    common_pb2.TIER_HOST: "host",
    common_pb2.TIER_DISK: "disk",
    common_pb2.TIER_REMOTE: "remote",
}
# Every spelling the host accepts (directive.ParseTierName).
_TIER_BY_NAME = {
    "device": common_pb2.TIER_DEVICE,
    "gpu": common_pb2.TIER_DEVICE,
    "host": common_pb2.TIER_HOST,
    "cpu_tier1": common_pb2.TIER_HOST,
    "host_pinned": common_pb2.TIER_HOST,
    "disk": common_pb2.TIER_DISK,
    "remote": common_pb2.TIER_REMOTE,
    "external": common_pb2.TIER_REMOTE,
}
# Dynamo's storage_tier names in events.
_EVENT_TIER_NAMES = {
    common_pb2.TIER_DEVICE: "device",
    common_pb2.TIER_HOST: "host_pinned",
    common_pb2.TIER_DISK: "disk",
    common_pb2.TIER_REMOTE: "external",
}

METADATA_SOURCE = "kvpilot-source"
METADATA_TENANT = "kvpilot-tenant"


@dataclass(frozen=True)
class Effect:
    """What an applied directive did."""

    blocks: int = 0
    skipped: int = 0
    missing: int = 0
    tokens: int = 0
    lease_id: str = ""
    ttl_seconds: float | None = None
    #: Why blocks were skipped: reason ("locked", "pinned", "leased",
    #: "shared", ...) to blocks; they add up to ``skipped``.
    skips: dict[str, int] = field(default_factory=dict)
    #: A splice's kept tokens recomputed as planned (those after each edit
    #: and the engine's share), of ``recompute_region`` after its first edit.
    recomputed_tokens: int = 0
    recompute_region: int = 0


@dataclass(frozen=True)
class DirectiveResult:
    """One directive's outcome within a turn."""

    index: int
    verb: str
    ok: bool
    effect: Effect
    error: KvpilotError | None = None


@dataclass(frozen=True)
class ApplyResult:
    """A turn's outcome: ``ok`` for all, else ``error`` and per-directive results."""

    ok: bool
    turn_id: str
    results: list[DirectiveResult]
    error: KvpilotError | None = None
    # Set on a turn applied in full whose pins or leases could not be saved
    # to disk: a restart now would lose them. Do not resend the turn.
    warning: str = ""


@dataclass(frozen=True)
class CacheControlResult:
    """A cache_control reply (Dynamo's PIN API shape).

    ``count`` is what ``count_field`` names: pinned_count, unpinned_count or
    evicted_count; ``total_blocks`` the full pages of token_ids for the
    prefix actions.
    """

    status: str
    count: int
    count_field: str
    message: str
    worker_id: str
    total_blocks: int
    error: KvpilotError | None = None

    @property
    def ok(self) -> bool:
        """Whether status is "ok"."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """The router's JSON reply: status, <count_field>, message, worker_id."""
        out: dict[str, Any] = {"status": self.status, "message": self.message}
        if self.count_field:
            out[self.count_field] = self.count
        if self.total_blocks:
            out["total_blocks"] = self.total_blocks
        if self.worker_id:
            out["worker_id"] = self.worker_id
        if self.error is not None:
            out["code"] = self.error.code
        return out


@dataclass(frozen=True)
class TierStats:
    """One tier's figures. Bytes are 0 until an engine registered a layout."""

    tier: str
    pages: int
    bytes: int
    capacity_bytes: int
    pinned_pages: int
    pinned_bytes: int
    leased_pages: int


@dataclass(frozen=True)
class Stats:
    """The host's Stats answer; ``tiers`` by name (device, host, disk, remote).

    ``tenant`` and the ``tenant_*`` fields are set when the figures are one
    tenant's.
    """

    worker_id: str
    page_size_tokens: int
    tiers: dict[str, TierStats]
    leases: int
    sessions: int
    tenant: str = ""
    tenant_pages: int = 0
    tenant_pinned_pages: int = 0
    tenant_pin_quota: int = 0
    #: Pins held (a path pinned twice counts twice).
    pins: int = 0
    #: Saved pins and leases not restored yet (the pools open when an
    #: engine registers): ``pins`` and ``leases`` count the saved ones.
    restore_pending: bool = False
    #: Leases whose pages could not move to the pause tier: lease id to why.
    degraded_leases: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KVEvent:
    """A KV event in Dynamo's RouterEvent shape.

    ``kind`` is "stored", "removed" or "cleared"; ``storage_tier`` uses
    Dynamo's names (device, host_pinned, disk, external). A stored event has
    ``parent_hash`` (None for a root) and ``blocks`` as (block_hash,
    tokens_hash); a removed one ``block_hashes``.
    """

    event_id: int
    worker_id: str
    storage_tier: str
    dp_rank: int
    kind: str
    parent_hash: int | None = None
    blocks: list[tuple[int, int]] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)


def _effect(m: directive_pb2.Effect) -> Effect:
    return Effect(
        blocks=m.blocks,
        skipped=m.skipped,
        missing=m.missing,
        tokens=m.tokens,
        lease_id=m.lease_id,
        ttl_seconds=from_duration(m.ttl) if m.HasField("ttl") else None,
        skips={k.reason: k.blocks for k in m.skips},
        recomputed_tokens=m.recomputed_tokens,
        recompute_region=m.recompute_region,
    )


def _apply_result(resp: control_pb2.ApplyResponse) -> ApplyResult:
    results = [
        DirectiveResult(
            index=r.index,
            verb=r.verb,
            ok=r.ok,
            effect=_effect(r.effect),
            error=from_proto(r.error) if r.HasField("error") else None,
        )
        for r in resp.results
    ]
    err = from_proto(resp.error) if resp.HasField("error") else None
    return ApplyResult(
        ok=resp.ok, turn_id=resp.turn_id, results=results, error=err, warning=resp.warning
    )


def tier_to_proto(name: str) -> common_pb2.Tier:
    """The Tier enum of a tier name (device/GPU, host/CPU_TIER1/host_pinned,
    disk, remote/external); raises InvalidTier.
    """
    t = _TIER_BY_NAME.get(name.lower())
    if t is None:
        raise InvalidTier(repr(name))
    return t


class ControlClient:
    """A connection to a host's Control socket; thread-safe.

    Args:
        socket: the host's control socket (``<data_dir>/run/control.sock``
            by default). A missing socket raises Unavailable here.
        source: names this client in the host's audit log.
        timeout: seconds per call.
    """

    def __init__(self, socket: str, *, source: str = "", timeout: float = 10.0) -> None:
        self.socket = os.path.abspath(socket)
        if not os.path.exists(self.socket):
            raise Unavailable(
                f"control socket {self.socket} does not exist: is `kvpilot serve` running, "
                "and is this the path in control.socket (<data_dir>/run/control.sock by default)?"
            )
        self.timeout = timeout
        self._md: list[tuple[str, str]] = [(METADATA_SOURCE, source)] if source else []
        self._channel = grpc.insecure_channel(
            "unix:" + self.socket, options=[("grpc.max_receive_message_length", 16 << 20)]
        )
        self._stub = control_pb2_grpc.ControlStub(self._channel)
        self._lock = threading.Lock()
        self._streams: set[grpc.Future] = set()
        self._closed = False

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Ends event streams and closes the connection."""
        with self._lock:
            self._closed = True
            streams, self._streams = list(self._streams), set()
        for s in streams:
            s.cancel()
        self._channel.close()

    def _rpc(self, method: Any, req: Any, timeout: float | None) -> Any:
        try:
            return method(
                req, timeout=self.timeout if timeout is None else timeout, metadata=self._md
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def apply(
        self,
        directives: Iterable[directive_pb2.Directive | Mapping[str, Any]],
        *,
        tenant: str = "",
        turn_id: str = "",
        check: bool = True,
        timeout: float | None = None,
    ) -> ApplyResult:
        """Applies one turn of directives, all or none.

        ``directives`` are Directive messages (see kvpilot.directives) or
        dicts in the JSON command form. When the host refuses the turn,
        raises its error (``e.index`` names the failing directive; with more
        than one directive, its detail says none was applied) with the
        ApplyResult in ``e.result``, unless ``check`` is False.
        """
        req = control_pb2.ApplyRequest(
            turn_id=turn_id, tenant=tenant, directives=[to_directive(d) for d in directives]
        )
        result = _apply_result(self._rpc(self._stub.Apply, req, timeout))
        if check and not result.ok:
            err = result.error or next(
                (r.error for r in result.results if r.error is not None), None
            )
            if err is None:
                err = Unavailable("the host refused the turn without saying why")
            if len(result.results) > 1:
                # All or none: say that the directives beside the refused
                # one were not applied either, so none is lost unnoticed.
                note = f"none of the turn's {len(result.results)} directives was applied"
                err.detail = f"{err.detail}: {note}" if err.detail else note
            err.result = result  # type: ignore[attr-defined]
            raise err
        return result

    def cache_control(
        self,
        action: str,
        *,
        block_hashes: Sequence[int | str] = (),
        token_ids: Sequence[int] = (),
        ttl_seconds: TTLValue | None = None,
        worker_id: str = "",
        tenant: str = "",
        check: bool = True,
        timeout: float | None = None,
    ) -> CacheControlResult:
        """The router's cache_control API: ``action`` is pin_blocks,
        unpin_blocks, evict_descendants, pin_prefix or unpin_prefix.

        Raises the error of a reply with status "error" (the result in
        ``e.result``) unless ``check`` is False.
        """
        req = control_pb2.CacheControlRequest(
            action=action,
            block_hashes=[hash_value(h) for h in block_hashes],
            token_ids=list(token_ids),
            worker_id=worker_id,
            tenant=tenant,
        )
        ttl = to_duration(ttl_seconds)
        if ttl is not None:
            req.ttl.CopyFrom(ttl)
        resp = self._rpc(self._stub.CacheControl, req, timeout)
        result = CacheControlResult(
            status=resp.status,
            count=resp.count,
            count_field=resp.count_field,
            message=resp.message,
            worker_id=resp.worker_id,
            total_blocks=resp.total_blocks,
            error=from_proto(resp.error) if resp.HasField("error") else None,
        )
        if check and not result.ok:
            err = result.error or Unavailable(result.message or "cache_control failed")
            err.result = result  # type: ignore[attr-defined]
            raise err
        return result

    def ping(self, *, timeout: float | None = None) -> str:
        """Checks the host answers on the socket; returns its worker id."""
        r = self._rpc(self._stub.Ping, control_pb2.PingRequest(), timeout)
        return str(r.worker_id)

    def stats(self, tenant: str = "", *, timeout: float | None = None) -> Stats:
        """Each tier's pages, bytes, pinned and leased pages: host-wide, or
        one tenant's.
        """
        r = self._rpc(self._stub.Stats, control_pb2.StatsRequest(tenant=tenant), timeout)
        tiers = {
            _TIER_NAMES.get(t.tier, str(t.tier)): TierStats(
                tier=_TIER_NAMES.get(t.tier, str(t.tier)),
                pages=t.pages,
                bytes=t.bytes,
                capacity_bytes=t.capacity_bytes,
                pinned_pages=t.pinned_pages,
                pinned_bytes=t.pinned_bytes,
                leased_pages=t.leased_pages,
            )
            for t in r.tiers
        }
        return Stats(
            worker_id=r.worker_id,
            page_size_tokens=r.page_size_tokens,
            tiers=tiers,
            leases=r.leases,
            sessions=r.sessions,
            tenant=r.tenant,
            tenant_pages=r.tenant_pages,
            tenant_pinned_pages=r.tenant_pinned_pages,
            tenant_pin_quota=r.tenant_pin_quota,
            pins=r.pins,
            restore_pending=r.restore_pending,
            degraded_leases={d.lease_id: d.reason for d in r.degraded_leases},
        )

    def watch_events(
        self, tiers: Sequence[str] = (), *, tenant: str = "", ready: threading.Event | None = None
    ) -> Iterator[KVEvent]:
        """KV events as the host publishes them, until the host ends the
        stream, the consumer stops iterating (``close()`` on the generator)
        or the client closes.

        ``tiers`` keeps only those tiers; ``tenant`` only that tenant's
        events. ``ready`` is set once the host registered the watch (events
        after it are seen). A watcher that falls behind is ended by the host
        (RateLimited, "fell behind" in the detail): re-read and watch again.
        """
        req = control_pb2.WatchEventsRequest(tiers=[tier_to_proto(t) for t in tiers])
        md = list(self._md)
        if tenant:
            md.append((METADATA_TENANT, tenant))
        call = self._stub.WatchEvents(req, metadata=md)
        with self._lock:
            if self._closed:
                call.cancel()
                return
            self._streams.add(call)
        try:
            # The host sends headers once the watch is registered; a refused
            # watch ends without them, and iteration raises its status.
            if call.initial_metadata() is not None and ready is not None:
                ready.set()
            for m in call:
                yield _event(m)
        except grpc.RpcError as e:
            if self._closed or e.code() == grpc.StatusCode.CANCELLED:
                return
            raise from_rpc_error(e) from None
        finally:
            call.cancel()
            with self._lock:
                self._streams.discard(call)


def _event(m: control_pb2.KVEvent) -> KVEvent:
    kind = m.WhichOneof("data") or "cleared"
    ev = KVEvent(
        event_id=m.event_id,
        worker_id=m.worker_id,
        storage_tier=_EVENT_TIER_NAMES.get(m.storage_tier, ""),
        dp_rank=m.dp_rank,
        kind=kind,
    )
    if kind == "stored":
        st = m.stored
        return replace(
            ev,
            parent_hash=st.parent_hash if st.HasField("parent_hash") else None,
            blocks=[(b.block_hash, b.tokens_hash) for b in st.blocks],
        )
    if kind == "removed":
        return replace(ev, block_hashes=list(m.removed.block_hashes))
    return ev
