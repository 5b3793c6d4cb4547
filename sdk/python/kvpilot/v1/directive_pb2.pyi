import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from kvpilot.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Warm(_message.Message):
    __slots__ = ("block_keys", "target_tier")
    BLOCK_KEYS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TIER_FIELD_NUMBER: _ClassVar[int]
    block_keys: _containers.RepeatedScalarFieldContainer[str]
    target_tier: str
    def __init__(self, block_keys: _Optional[_Iterable[str]] = ..., target_tier: _Optional[str] = ...) -> None: ...

class Prune(_message.Message):
    __slots__ = ("after_block_hash",)
    AFTER_BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    after_block_hash: int
    def __init__(self, after_block_hash: _Optional[int] = ...) -> None: ...

class Cache(_message.Message):
    __slots__ = ("block_hashes", "pin", "ttl")
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    PIN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    pin: bool
    ttl: _duration_pb2.Duration
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ..., pin: _Optional[bool] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Think(_message.Message):
    __slots__ = ("block_hashes", "transient")
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    TRANSIENT_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    transient: bool
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ..., transient: _Optional[bool] = ...) -> None: ...

class Pause(_message.Message):
    __slots__ = ("block_hashes", "ttl", "lease_id")
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    ttl: _duration_pb2.Duration
    lease_id: str
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_id: _Optional[str] = ...) -> None: ...

class RenewLease(_message.Message):
    __slots__ = ("lease_id", "new_ttl")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NEW_TTL_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    new_ttl: _duration_pb2.Duration
    def __init__(self, lease_id: _Optional[str] = ..., new_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RevokeLease(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class Replacement(_message.Message):
    __slots__ = ("tokens", "text")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    text: str
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ...) -> None: ...

class Splice(_message.Message):
    __slots__ = ("session", "start", "end", "replacement", "mode", "recompute")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    session: str
    start: int
    end: int
    replacement: Replacement
    mode: str
    recompute: Recompute
    def __init__(self, session: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., replacement: _Optional[_Union[Replacement, _Mapping]] = ..., mode: _Optional[str] = ..., recompute: _Optional[_Union[Recompute, _Mapping]] = ...) -> None: ...

class Recompute(_message.Message):
    __slots__ = ("first", "share", "max_kl")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    MAX_KL_FIELD_NUMBER: _ClassVar[int]
    first: int
    share: float
    max_kl: float
    def __init__(self, first: _Optional[int] = ..., share: _Optional[float] = ..., max_kl: _Optional[float] = ...) -> None: ...

class Pin(_message.Message):
    __slots__ = ("session", "end", "ttl")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    session: str
    end: int
    ttl: _duration_pb2.Duration
    def __init__(self, session: _Optional[str] = ..., end: _Optional[int] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Retain(_message.Message):
    __slots__ = ("session", "start", "end", "priority", "duration")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    session: str
    start: int
    end: int
    priority: int
    duration: _duration_pb2.Duration
    def __init__(self, session: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., priority: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Evict(_message.Message):
    __slots__ = ("session", "start", "end", "mode")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    session: str
    start: int
    end: int
    mode: str
    def __init__(self, session: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., mode: _Optional[str] = ...) -> None: ...

class Resume(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class Share(_message.Message):
    __slots__ = ("session", "end", "scope")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    session: str
    end: int
    scope: str
    def __init__(self, session: _Optional[str] = ..., end: _Optional[int] = ..., scope: _Optional[str] = ...) -> None: ...

class Directive(_message.Message):
    __slots__ = ("warm", "prune", "cache", "think", "pause", "renew_lease", "revoke_lease", "splice", "pin", "retain", "evict", "resume", "share")
    WARM_FIELD_NUMBER: _ClassVar[int]
    PRUNE_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    THINK_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    RENEW_LEASE_FIELD_NUMBER: _ClassVar[int]
    REVOKE_LEASE_FIELD_NUMBER: _ClassVar[int]
    SPLICE_FIELD_NUMBER: _ClassVar[int]
    PIN_FIELD_NUMBER: _ClassVar[int]
    RETAIN_FIELD_NUMBER: _ClassVar[int]
    EVICT_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    warm: Warm
    prune: Prune
    cache: Cache
    think: Think
    pause: Pause
    renew_lease: RenewLease
    revoke_lease: RevokeLease
    splice: Splice
    pin: Pin
    retain: Retain
    evict: Evict
    resume: Resume
    share: Share
    def __init__(self, warm: _Optional[_Union[Warm, _Mapping]] = ..., prune: _Optional[_Union[Prune, _Mapping]] = ..., cache: _Optional[_Union[Cache, _Mapping]] = ..., think: _Optional[_Union[Think, _Mapping]] = ..., pause: _Optional[_Union[Pause, _Mapping]] = ..., renew_lease: _Optional[_Union[RenewLease, _Mapping]] = ..., revoke_lease: _Optional[_Union[RevokeLease, _Mapping]] = ..., splice: _Optional[_Union[Splice, _Mapping]] = ..., pin: _Optional[_Union[Pin, _Mapping]] = ..., retain: _Optional[_Union[Retain, _Mapping]] = ..., evict: _Optional[_Union[Evict, _Mapping]] = ..., resume: _Optional[_Union[Resume, _Mapping]] = ..., share: _Optional[_Union[Share, _Mapping]] = ...) -> None: ...

class Effect(_message.Message):
    __slots__ = ("blocks", "skipped", "missing", "tokens", "lease_id", "ttl", "skips", "recomputed_tokens", "recompute_region")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    SKIPS_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_REGION_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    skipped: int
    missing: int
    tokens: int
    lease_id: str
    ttl: _duration_pb2.Duration
    skips: _containers.RepeatedCompositeFieldContainer[Skip]
    recomputed_tokens: int
    recompute_region: int
    def __init__(self, blocks: _Optional[int] = ..., skipped: _Optional[int] = ..., missing: _Optional[int] = ..., tokens: _Optional[int] = ..., lease_id: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., skips: _Optional[_Iterable[_Union[Skip, _Mapping]]] = ..., recomputed_tokens: _Optional[int] = ..., recompute_region: _Optional[int] = ...) -> None: ...

class Skip(_message.Message):
    __slots__ = ("reason", "blocks")
    REASON_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    reason: str
    blocks: int
    def __init__(self, reason: _Optional[str] = ..., blocks: _Optional[int] = ...) -> None: ...

class DirectiveResult(_message.Message):
    __slots__ = ("index", "verb", "ok", "effect", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    VERB_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    verb: str
    ok: bool
    effect: Effect
    error: _common_pb2.Error
    def __init__(self, index: _Optional[int] = ..., verb: _Optional[str] = ..., ok: _Optional[bool] = ..., effect: _Optional[_Union[Effect, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...
