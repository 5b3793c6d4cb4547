from kvpilot.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EngineApiVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_API_VERSION_UNSPECIFIED: _ClassVar[EngineApiVersion]
    ENGINE_API_VERSION_1: _ClassVar[EngineApiVersion]

class EngineMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_MODE_UNSPECIFIED: _ClassVar[EngineMode]
    ENGINE_MODE_ARENA: _ClassVar[EngineMode]
    ENGINE_MODE_CONNECTOR: _ClassVar[EngineMode]
ENGINE_API_VERSION_UNSPECIFIED: EngineApiVersion
ENGINE_API_VERSION_1: EngineApiVersion
ENGINE_MODE_UNSPECIFIED: EngineMode
ENGINE_MODE_ARENA: EngineMode
ENGINE_MODE_CONNECTOR: EngineMode

class KVBuffer(_message.Message):
    __slots__ = ("name", "heads", "head_dim")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    name: str
    heads: int
    head_dim: int
    def __init__(self, name: _Optional[str] = ..., heads: _Optional[int] = ..., head_dim: _Optional[int] = ...) -> None: ...

class RopeSlice(_message.Message):
    __slots__ = ("buffer", "offset", "dim", "style")
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    STYLE_FIELD_NUMBER: _ClassVar[int]
    buffer: int
    offset: int
    dim: int
    style: str
    def __init__(self, buffer: _Optional[int] = ..., offset: _Optional[int] = ..., dim: _Optional[int] = ..., style: _Optional[str] = ...) -> None: ...

class RopeScaling(_message.Message):
    __slots__ = ("type", "factor", "original_max_position", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "no_truncate")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_MAX_POSITION_FIELD_NUMBER: _ClassVar[int]
    LOW_FREQ_FACTOR_FIELD_NUMBER: _ClassVar[int]
    HIGH_FREQ_FACTOR_FIELD_NUMBER: _ClassVar[int]
    BETA_FAST_FIELD_NUMBER: _ClassVar[int]
    BETA_SLOW_FIELD_NUMBER: _ClassVar[int]
    MSCALE_FIELD_NUMBER: _ClassVar[int]
    MSCALE_ALL_DIM_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    NO_TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    type: str
    factor: float
    original_max_position: int
    low_freq_factor: float
    high_freq_factor: float
    beta_fast: float
    beta_slow: float
    mscale: float
    mscale_all_dim: float
    attention_factor: float
    no_truncate: bool
    def __init__(self, type: _Optional[str] = ..., factor: _Optional[float] = ..., original_max_position: _Optional[int] = ..., low_freq_factor: _Optional[float] = ..., high_freq_factor: _Optional[float] = ..., beta_fast: _Optional[float] = ..., beta_slow: _Optional[float] = ..., mscale: _Optional[float] = ..., mscale_all_dim: _Optional[float] = ..., attention_factor: _Optional[float] = ..., no_truncate: _Optional[bool] = ...) -> None: ...

class RopeConfig(_message.Message):
    __slots__ = ("base", "scaling")
    BASE_FIELD_NUMBER: _ClassVar[int]
    SCALING_FIELD_NUMBER: _ClassVar[int]
    base: float
    scaling: RopeScaling
    def __init__(self, base: _Optional[float] = ..., scaling: _Optional[_Union[RopeScaling, _Mapping]] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("api_version", "engine_id", "model", "page_size", "dtype", "layers", "buffers", "rope_slice", "rope", "reset_cache", "mode", "recompute", "parts")
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    BUFFERS_FIELD_NUMBER: _ClassVar[int]
    ROPE_SLICE_FIELD_NUMBER: _ClassVar[int]
    ROPE_FIELD_NUMBER: _ClassVar[int]
    RESET_CACHE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    api_version: int
    engine_id: str
    model: str
    page_size: int
    dtype: str
    layers: int
    buffers: _containers.RepeatedCompositeFieldContainer[KVBuffer]
    rope_slice: RopeSlice
    rope: RopeConfig
    reset_cache: bool
    mode: EngineMode
    recompute: bool
    parts: int
    def __init__(self, api_version: _Optional[int] = ..., engine_id: _Optional[str] = ..., model: _Optional[str] = ..., page_size: _Optional[int] = ..., dtype: _Optional[str] = ..., layers: _Optional[int] = ..., buffers: _Optional[_Iterable[_Union[KVBuffer, _Mapping]]] = ..., rope_slice: _Optional[_Union[RopeSlice, _Mapping]] = ..., rope: _Optional[_Union[RopeConfig, _Mapping]] = ..., reset_cache: _Optional[bool] = ..., mode: _Optional[_Union[EngineMode, str]] = ..., recompute: _Optional[bool] = ..., parts: _Optional[int] = ...) -> None: ...

class PoolHandle(_message.Message):
    __slots__ = ("tier", "kind", "size_bytes", "slots", "arrangement", "cuda_ipc", "pinned", "device_ordinal", "staging")
    TIER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    ARRANGEMENT_FIELD_NUMBER: _ClassVar[int]
    CUDA_IPC_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ORDINAL_FIELD_NUMBER: _ClassVar[int]
    STAGING_FIELD_NUMBER: _ClassVar[int]
    tier: _common_pb2.Tier
    kind: str
    size_bytes: int
    slots: int
    arrangement: str
    cuda_ipc: bytes
    pinned: bool
    device_ordinal: int
    staging: bool
    def __init__(self, tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., kind: _Optional[str] = ..., size_bytes: _Optional[int] = ..., slots: _Optional[int] = ..., arrangement: _Optional[str] = ..., cuda_ipc: _Optional[bytes] = ..., pinned: _Optional[bool] = ..., device_ordinal: _Optional[int] = ..., staging: _Optional[bool] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("registration_id", "boot_id", "worker_id", "layout_fingerprint", "page_size", "page_bytes", "pools", "fd_socket", "fd_token", "reattached", "api_version", "cached_pages", "mode", "joined", "features")
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    FD_SOCKET_FIELD_NUMBER: _ClassVar[int]
    FD_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REATTACHED_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    CACHED_PAGES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    JOINED_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    registration_id: str
    boot_id: str
    worker_id: str
    layout_fingerprint: int
    page_size: int
    page_bytes: int
    pools: _containers.RepeatedCompositeFieldContainer[PoolHandle]
    fd_socket: str
    fd_token: bytes
    reattached: bool
    api_version: int
    cached_pages: int
    mode: EngineMode
    joined: bool
    features: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, registration_id: _Optional[str] = ..., boot_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., layout_fingerprint: _Optional[int] = ..., page_size: _Optional[int] = ..., page_bytes: _Optional[int] = ..., pools: _Optional[_Iterable[_Union[PoolHandle, _Mapping]]] = ..., fd_socket: _Optional[str] = ..., fd_token: _Optional[bytes] = ..., reattached: _Optional[bool] = ..., api_version: _Optional[int] = ..., cached_pages: _Optional[int] = ..., mode: _Optional[_Union[EngineMode, str]] = ..., joined: _Optional[bool] = ..., features: _Optional[_Iterable[str]] = ...) -> None: ...

class TokenSpan(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "tool_name", "content", "span", "thinking", "thinking_text")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SPAN_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    THINKING_TEXT_FIELD_NUMBER: _ClassVar[int]
    role: str
    tool_name: str
    content: str
    span: TokenSpan
    thinking: _containers.RepeatedCompositeFieldContainer[TokenSpan]
    thinking_text: str
    def __init__(self, role: _Optional[str] = ..., tool_name: _Optional[str] = ..., content: _Optional[str] = ..., span: _Optional[_Union[TokenSpan, _Mapping]] = ..., thinking: _Optional[_Iterable[_Union[TokenSpan, _Mapping]]] = ..., thinking_text: _Optional[str] = ...) -> None: ...

class MatchRequest(_message.Message):
    __slots__ = ("registration_id", "request_id", "session", "tenant", "tokens", "messages", "load_back_deadline_ms")
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    LOAD_BACK_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    registration_id: str
    request_id: str
    session: str
    tenant: str
    tokens: _containers.RepeatedScalarFieldContainer[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    load_back_deadline_ms: int
    def __init__(self, registration_id: _Optional[str] = ..., request_id: _Optional[str] = ..., session: _Optional[str] = ..., tenant: _Optional[str] = ..., tokens: _Optional[_Iterable[int]] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., load_back_deadline_ms: _Optional[int] = ...) -> None: ...

class MatchResponse(_message.Message):
    __slots__ = ("request_id", "cached_tokens", "page_slots", "block_hashes", "loaded_pages", "loaded_bytes", "load_back_us", "load_back_incomplete", "dropped_pages", "page_size")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    LOADED_PAGES_FIELD_NUMBER: _ClassVar[int]
    LOADED_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOAD_BACK_US_FIELD_NUMBER: _ClassVar[int]
    LOAD_BACK_INCOMPLETE_FIELD_NUMBER: _ClassVar[int]
    DROPPED_PAGES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    cached_tokens: int
    page_slots: _containers.RepeatedScalarFieldContainer[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    loaded_pages: int
    loaded_bytes: int
    load_back_us: int
    load_back_incomplete: bool
    dropped_pages: int
    page_size: int
    def __init__(self, request_id: _Optional[str] = ..., cached_tokens: _Optional[int] = ..., page_slots: _Optional[_Iterable[int]] = ..., block_hashes: _Optional[_Iterable[int]] = ..., loaded_pages: _Optional[int] = ..., loaded_bytes: _Optional[int] = ..., load_back_us: _Optional[int] = ..., load_back_incomplete: _Optional[bool] = ..., dropped_pages: _Optional[int] = ..., page_size: _Optional[int] = ...) -> None: ...

class AllocateRequest(_message.Message):
    __slots__ = ("registration_id", "request_id", "pages", "part", "first_page")
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PAGES_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    FIRST_PAGE_FIELD_NUMBER: _ClassVar[int]
    registration_id: str
    request_id: str
    pages: int
    part: int
    first_page: int
    def __init__(self, registration_id: _Optional[str] = ..., request_id: _Optional[str] = ..., pages: _Optional[int] = ..., part: _Optional[int] = ..., first_page: _Optional[int] = ...) -> None: ...

class AllocateResponse(_message.Message):
    __slots__ = ("page_slots", "evicted_pages")
    PAGE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    EVICTED_PAGES_FIELD_NUMBER: _ClassVar[int]
    page_slots: _containers.RepeatedScalarFieldContainer[int]
    evicted_pages: int
    def __init__(self, page_slots: _Optional[_Iterable[int]] = ..., evicted_pages: _Optional[int] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("registration_id", "request_id", "tokens", "page_slots", "first_page", "part")
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_PAGE_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    registration_id: str
    request_id: str
    tokens: _containers.RepeatedScalarFieldContainer[int]
    page_slots: _containers.RepeatedScalarFieldContainer[int]
    first_page: int
    part: int
    def __init__(self, registration_id: _Optional[str] = ..., request_id: _Optional[str] = ..., tokens: _Optional[_Iterable[int]] = ..., page_slots: _Optional[_Iterable[int]] = ..., first_page: _Optional[int] = ..., part: _Optional[int] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("stored", "present", "block_hashes", "parts_waiting")
    STORED_FIELD_NUMBER: _ClassVar[int]
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    PARTS_WAITING_FIELD_NUMBER: _ClassVar[int]
    stored: int
    present: int
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    parts_waiting: int
    def __init__(self, stored: _Optional[int] = ..., present: _Optional[int] = ..., block_hashes: _Optional[_Iterable[int]] = ..., parts_waiting: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("registration_id", "request_id")
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    registration_id: str
    request_id: str
    def __init__(self, registration_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("freed_slots",)
    FREED_SLOTS_FIELD_NUMBER: _ClassVar[int]
    freed_slots: int
    def __init__(self, freed_slots: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., reasoning_tokens: _Optional[int] = ...) -> None: ...

class CacheControl(_message.Message):
    __slots__ = ("type", "ttl")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    type: str
    ttl: str
    def __init__(self, type: _Optional[str] = ..., ttl: _Optional[str] = ...) -> None: ...

class FinishRequest(_message.Message):
    __slots__ = ("registration_id", "request_id", "usage", "cache_control", "cache_control_json")
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CACHE_CONTROL_FIELD_NUMBER: _ClassVar[int]
    CACHE_CONTROL_JSON_FIELD_NUMBER: _ClassVar[int]
    registration_id: str
    request_id: str
    usage: Usage
    cache_control: CacheControl
    cache_control_json: str
    def __init__(self, registration_id: _Optional[str] = ..., request_id: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., cache_control: _Optional[_Union[CacheControl, _Mapping]] = ..., cache_control_json: _Optional[str] = ...) -> None: ...

class FinishResponse(_message.Message):
    __slots__ = ("freed_slots", "pinned", "pinned_blocks", "total_blocks", "ttl_ms", "pin_error")
    FREED_SLOTS_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    PINNED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    PIN_ERROR_FIELD_NUMBER: _ClassVar[int]
    freed_slots: int
    pinned: bool
    pinned_blocks: int
    total_blocks: int
    ttl_ms: int
    pin_error: _common_pb2.Error
    def __init__(self, freed_slots: _Optional[int] = ..., pinned: _Optional[bool] = ..., pinned_blocks: _Optional[int] = ..., total_blocks: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., pin_error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...

class FillOrdersRequest(_message.Message):
    __slots__ = ("registration_id",)
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    registration_id: str
    def __init__(self, registration_id: _Optional[str] = ...) -> None: ...

class FillOrder(_message.Message):
    __slots__ = ("order_id", "session", "tenant", "position", "tokens", "page_slots", "first_offset", "prefix_page_slots", "positions", "candidates")
    ORDER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PREFIX_PAGE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    order_id: str
    session: str
    tenant: str
    position: int
    tokens: _containers.RepeatedScalarFieldContainer[int]
    page_slots: _containers.RepeatedScalarFieldContainer[int]
    first_offset: int
    prefix_page_slots: _containers.RepeatedScalarFieldContainer[int]
    positions: _containers.RepeatedScalarFieldContainer[int]
    candidates: RecomputeCandidates
    def __init__(self, order_id: _Optional[str] = ..., session: _Optional[str] = ..., tenant: _Optional[str] = ..., position: _Optional[int] = ..., tokens: _Optional[_Iterable[int]] = ..., page_slots: _Optional[_Iterable[int]] = ..., first_offset: _Optional[int] = ..., prefix_page_slots: _Optional[_Iterable[int]] = ..., positions: _Optional[_Iterable[int]] = ..., candidates: _Optional[_Union[RecomputeCandidates, _Mapping]] = ...) -> None: ...

class RecomputeCandidates(_message.Message):
    __slots__ = ("positions", "tokens", "share", "max_kl", "region", "echo")
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    MAX_KL_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    ECHO_FIELD_NUMBER: _ClassVar[int]
    positions: _containers.RepeatedScalarFieldContainer[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    share: float
    max_kl: float
    region: int
    echo: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, positions: _Optional[_Iterable[int]] = ..., tokens: _Optional[_Iterable[int]] = ..., share: _Optional[float] = ..., max_kl: _Optional[float] = ..., region: _Optional[int] = ..., echo: _Optional[_Iterable[int]] = ...) -> None: ...

class CompleteFillRequest(_message.Message):
    __slots__ = ("registration_id", "order_id", "ok", "error", "recomputed", "estimated_kl")
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    ORDER_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTED_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_KL_FIELD_NUMBER: _ClassVar[int]
    registration_id: str
    order_id: str
    ok: bool
    error: str
    recomputed: int
    estimated_kl: float
    def __init__(self, registration_id: _Optional[str] = ..., order_id: _Optional[str] = ..., ok: _Optional[bool] = ..., error: _Optional[str] = ..., recomputed: _Optional[int] = ..., estimated_kl: _Optional[float] = ...) -> None: ...

class CompleteFillResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
