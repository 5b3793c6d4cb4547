import datetime

from kvpilot.v1 import common_pb2 as _common_pb2
from kvpilot.v1 import directive_pb2 as _directive_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class ApplyRequest(_message.Message):
    __slots__ = ("turn_id", "tenant", "directives")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVES_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    tenant: str
    directives: _containers.RepeatedCompositeFieldContainer[_directive_pb2.Directive]
    def __init__(self, turn_id: _Optional[str] = ..., tenant: _Optional[str] = ..., directives: _Optional[_Iterable[_Union[_directive_pb2.Directive, _Mapping]]] = ...) -> None: ...

class ApplyResponse(_message.Message):
    __slots__ = ("ok", "turn_id", "results", "error", "warning")
    OK_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    turn_id: str
    results: _containers.RepeatedCompositeFieldContainer[_directive_pb2.DirectiveResult]
    error: _common_pb2.Error
    warning: str
    def __init__(self, ok: _Optional[bool] = ..., turn_id: _Optional[str] = ..., results: _Optional[_Iterable[_Union[_directive_pb2.DirectiveResult, _Mapping]]] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., warning: _Optional[str] = ...) -> None: ...

class CacheControlRequest(_message.Message):
    __slots__ = ("action", "block_hashes", "token_ids", "ttl", "worker_id", "tenant")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    action: str
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    ttl: _duration_pb2.Duration
    worker_id: str
    tenant: str
    def __init__(self, action: _Optional[str] = ..., block_hashes: _Optional[_Iterable[int]] = ..., token_ids: _Optional[_Iterable[int]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., worker_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class CacheControlResponse(_message.Message):
    __slots__ = ("status", "count", "count_field", "message", "worker_id", "error", "total_blocks")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    status: str
    count: int
    count_field: str
    message: str
    worker_id: str
    error: _common_pb2.Error
    total_blocks: int
    def __init__(self, status: _Optional[str] = ..., count: _Optional[int] = ..., count_field: _Optional[str] = ..., message: _Optional[str] = ..., worker_id: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., total_blocks: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class TierStats(_message.Message):
    __slots__ = ("tier", "pages", "bytes", "capacity_bytes", "pinned_pages", "pinned_bytes", "leased_pages")
    TIER_FIELD_NUMBER: _ClassVar[int]
    PAGES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PINNED_PAGES_FIELD_NUMBER: _ClassVar[int]
    PINNED_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEASED_PAGES_FIELD_NUMBER: _ClassVar[int]
    tier: _common_pb2.Tier
    pages: int
    bytes: int
    capacity_bytes: int
    pinned_pages: int
    pinned_bytes: int
    leased_pages: int
    def __init__(self, tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., pages: _Optional[int] = ..., bytes: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., pinned_pages: _Optional[int] = ..., pinned_bytes: _Optional[int] = ..., leased_pages: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("worker_id", "page_size_tokens", "tiers", "leases", "sessions", "tenant", "tenant_pages", "tenant_pinned_pages", "tenant_pin_quota", "degraded_leases", "pins", "restore_pending")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TENANT_PAGES_FIELD_NUMBER: _ClassVar[int]
    TENANT_PINNED_PAGES_FIELD_NUMBER: _ClassVar[int]
    TENANT_PIN_QUOTA_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_LEASES_FIELD_NUMBER: _ClassVar[int]
    PINS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_PENDING_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    page_size_tokens: int
    tiers: _containers.RepeatedCompositeFieldContainer[TierStats]
    leases: int
    sessions: int
    tenant: str
    tenant_pages: int
    tenant_pinned_pages: int
    tenant_pin_quota: int
    degraded_leases: _containers.RepeatedCompositeFieldContainer[DegradedLease]
    pins: int
    restore_pending: bool
    def __init__(self, worker_id: _Optional[str] = ..., page_size_tokens: _Optional[int] = ..., tiers: _Optional[_Iterable[_Union[TierStats, _Mapping]]] = ..., leases: _Optional[int] = ..., sessions: _Optional[int] = ..., tenant: _Optional[str] = ..., tenant_pages: _Optional[int] = ..., tenant_pinned_pages: _Optional[int] = ..., tenant_pin_quota: _Optional[int] = ..., degraded_leases: _Optional[_Iterable[_Union[DegradedLease, _Mapping]]] = ..., pins: _Optional[int] = ..., restore_pending: _Optional[bool] = ...) -> None: ...

class DegradedLease(_message.Message):
    __slots__ = ("lease_id", "tenant", "reason")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    tenant: str
    reason: str
    def __init__(self, lease_id: _Optional[str] = ..., tenant: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("tiers",)
    TIERS_FIELD_NUMBER: _ClassVar[int]
    tiers: _containers.RepeatedScalarFieldContainer[_common_pb2.Tier]
    def __init__(self, tiers: _Optional[_Iterable[_Union[_common_pb2.Tier, str]]] = ...) -> None: ...

class StoredBlock(_message.Message):
    __slots__ = ("block_hash", "tokens_hash")
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    TOKENS_HASH_FIELD_NUMBER: _ClassVar[int]
    block_hash: int
    tokens_hash: int
    def __init__(self, block_hash: _Optional[int] = ..., tokens_hash: _Optional[int] = ...) -> None: ...

class KVEvent(_message.Message):
    __slots__ = ("event_id", "worker_id", "storage_tier", "dp_rank", "stored", "removed", "cleared")
    class Stored(_message.Message):
        __slots__ = ("parent_hash", "blocks")
        PARENT_HASH_FIELD_NUMBER: _ClassVar[int]
        BLOCKS_FIELD_NUMBER: _ClassVar[int]
        parent_hash: int
        blocks: _containers.RepeatedCompositeFieldContainer[StoredBlock]
        def __init__(self, parent_hash: _Optional[int] = ..., blocks: _Optional[_Iterable[_Union[StoredBlock, _Mapping]]] = ...) -> None: ...
    class Removed(_message.Message):
        __slots__ = ("block_hashes",)
        BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
        block_hashes: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, block_hashes: _Optional[_Iterable[int]] = ...) -> None: ...
    class Cleared(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STORAGE_TIER_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    worker_id: str
    storage_tier: _common_pb2.Tier
    dp_rank: int
    stored: KVEvent.Stored
    removed: KVEvent.Removed
    cleared: KVEvent.Cleared
    def __init__(self, event_id: _Optional[int] = ..., worker_id: _Optional[str] = ..., storage_tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., dp_rank: _Optional[int] = ..., stored: _Optional[_Union[KVEvent.Stored, _Mapping]] = ..., removed: _Optional[_Union[KVEvent.Removed, _Mapping]] = ..., cleared: _Optional[_Union[KVEvent.Cleared, _Mapping]] = ...) -> None: ...
