package errcode

// The registry. Codes and numbers are stable: never renumber, never reuse a
// retired code, only append. Numbers are grouped:
//
//	1xxx  the request itself is malformed
//	2xxx  the request is well formed but invalid
//	3xxx  it names something the host does not have
//	4xxx  a budget, quota or rate was exhausted
//	5xxx  who is asking is not allowed to
//	6xxx  the host cannot do it (yet, or right now)
//	9xxx  kvpilot's own fault
const (
	BadRequest      Code = "bad_request"
	PayloadTooLarge Code = "payload_too_large"
	UnknownVerb     Code = "unknown_verb"
	TooMany         Code = "too_many"

	InvalidHash      Code = "invalid_hash"
	InvalidTTL       Code = "invalid_ttl"
	InvalidTier      Code = "invalid_tier"
	InvalidSpan      Code = "invalid_span"
	OverlappingSpans Code = "overlapping_spans"
	SinkProtected    Code = "sink_protected"
	InvalidPriority  Code = "invalid_priority"
	InvalidLease     Code = "invalid_lease_id"
	MissingField     Code = "missing_field"
	InvalidLayout    Code = "invalid_layout"
	InvalidSlot      Code = "invalid_slot"

	UnknownBlock   Code = "unknown_block"
	UnknownSession Code = "unknown_session"
	UnknownLease   Code = "unknown_lease"
	LeaseExists    Code = "lease_exists"
	WrongWorker    Code = "wrong_worker"

	UnknownRequest      Code = "unknown_request"
	UnknownRegistration Code = "unknown_registration"

	PinBudgetExhausted Code = "pin_budget_exhausted"
	TenantQuota        Code = "tenant_quota_exhausted"
	RateLimited        Code = "rate_limited"
	CapacityExhausted  Code = "capacity_exhausted"

	TenantMismatch   Code = "tenant_mismatch"
	PermissionDenied Code = "permission_denied"

	NotSupportedYet  Code = "not_supported_yet"
	TurnAborted      Code = "turn_aborted"
	BlockLocked      Code = "block_locked"
	Unavailable      Code = "unavailable"
	DeadlineExceeded Code = "deadline_exceeded"
	LayoutConflict   Code = "layout_conflict"

	Internal Code = "internal"
)

// gRPC status codes, by value (google.golang.org/grpc/codes): kept as plain
// numbers so that this package, and sdk/directive above it, do not pull in
// grpc. sdk/proto/convert checks them against the grpc names.
const (
	grpcInvalidArgument    uint32 = 3
	grpcDeadlineExceeded   uint32 = 4
	grpcNotFound           uint32 = 5
	grpcAlreadyExists      uint32 = 6
	grpcPermissionDenied   uint32 = 7
	grpcResourceExhausted  uint32 = 8
	grpcFailedPrecondition uint32 = 9
	grpcAborted            uint32 = 10
	grpcUnimplemented      uint32 = 12
	grpcInternal           uint32 = 13
	grpcUnavailable        uint32 = 14
)

var registry = []Entry{
	{BadRequest, 1001, grpcInvalidArgument,
		"malformed request",
		"send JSON matching the documented wire format; the detail names the offending field"},
	{PayloadTooLarge, 1002, grpcInvalidArgument,
		"payload too large",
		"split the request into smaller turns or fewer hashes per directive"},
	{UnknownVerb, 1003, grpcInvalidArgument,
		"unknown verb or action",
		"use one of the verbs the detail lists; check spelling and case"},
	{TooMany, 1004, grpcInvalidArgument,
		"too many items",
		"send fewer directives per turn or fewer hashes/tokens per directive; the detail gives the limit"},

	{InvalidHash, 2001, grpcInvalidArgument,
		"invalid block hash",
		"send hashes as JSON integers (unsigned or signed 64-bit) or strings in decimal or 0x-hex"},
	{InvalidTTL, 2002, grpcInvalidArgument,
		"invalid ttl",
		"send seconds as a non-negative number, or a duration string such as \"30s\", \"5m\", \"1h\""},
	{InvalidTier, 2003, grpcInvalidArgument,
		"invalid tier",
		"use device, host, disk or remote (GPU and CPU_TIER1 are accepted for device and host)"},
	{InvalidSpan, 2004, grpcInvalidArgument,
		"invalid span",
		"a span is [start, end) in token positions with 0 <= start <= end; it must cover at least one token unless it inserts a replacement"},
	{OverlappingSpans, 2005, grpcInvalidArgument,
		"overlapping spans in one turn",
		"send non-overlapping edits per session in one turn, or split them across turns"},
	{SinkProtected, 2006, grpcInvalidArgument,
		"span touches the protected attention-sink prefix",
		"start edits at or after the host's sink_tokens"},
	{InvalidPriority, 2007, grpcInvalidArgument,
		"invalid retention priority",
		"use a priority from 0 to 100"},
	{InvalidLease, 2008, grpcInvalidArgument,
		"invalid lease id",
		"use a non-empty id of at most 128 printable characters"},
	{MissingField, 2009, grpcInvalidArgument,
		"required field missing",
		"add the field the detail names"},
	{InvalidLayout, 2010, grpcInvalidArgument,
		"invalid KV layout",
		"register a layout whose page size matches the host's index.page_size, with valid buffers, dtype and RoPE slice; the detail names the field"},
	{InvalidSlot, 2011, grpcInvalidArgument,
		"invalid slot",
		"use only slots the host gave this request (Match or Allocate), each once, inside the arena"},

	{UnknownBlock, 3001, grpcNotFound,
		"unknown block",
		"the block is not cached on this worker; re-send after it is committed, or route to the worker that holds it"},
	{UnknownSession, 3002, grpcNotFound,
		"unknown session",
		"the session has no cached sequence on this worker; send the request first"},
	{UnknownLease, 3003, grpcNotFound,
		"unknown lease",
		"the lease expired or was never granted; pause the blocks again"},
	{LeaseExists, 3004, grpcAlreadyExists,
		"lease already exists",
		"use a fresh lease id, or RenewLease to extend the existing one"},
	{WrongWorker, 3005, grpcFailedPrecondition,
		"addressed to another worker",
		"send to kv-control-<worker_id> of the worker named in the request, or omit worker_id"},
	{UnknownRequest, 3006, grpcNotFound,
		"unknown request",
		"start the request with Match; a request ends at Release or Finish, or when its engine re-registers"},
	{UnknownRegistration, 3007, grpcFailedPrecondition,
		"unknown engine registration",
		"the host restarted or another registration replaced this one: register again and re-run the request"},

	{PinBudgetExhausted, 4001, grpcResourceExhausted,
		"pin budget exhausted",
		"unpin something, pin fewer blocks, or raise the tier's max pinned fraction"},
	{TenantQuota, 4002, grpcResourceExhausted,
		"tenant pin quota exhausted",
		"unpin this tenant's blocks or raise its quota"},
	{RateLimited, 4003, grpcResourceExhausted,
		"rate limited",
		"slow down and retry after a short backoff"},
	{CapacityExhausted, 4004, grpcResourceExhausted,
		"tier capacity exhausted",
		"free space on the target tier or target a colder one"},

	{TenantMismatch, 5001, grpcPermissionDenied,
		"tenant mismatch",
		"a directive may only act on its own tenant's blocks"},
	{PermissionDenied, 5002, grpcPermissionDenied,
		"permission denied",
		"connect as a user on the host's allow-list"},

	{NotSupportedYet, 6001, grpcUnimplemented,
		"not supported yet",
		"this verb is accepted and validated, but its mechanism is not built yet; nothing was changed"},
	{TurnAborted, 6002, grpcAborted,
		"turn aborted: another directive in it failed",
		"fix the failing directive (see its result) and re-send the whole turn; nothing was changed"},
	{BlockLocked, 6003, grpcFailedPrecondition,
		"block is in use by a running request",
		"retry after the request finishes"},
	{Unavailable, 6004, grpcUnavailable,
		"host unavailable",
		"retry with backoff; the host is starting, stopping or lost a tier"},
	{DeadlineExceeded, 6005, grpcDeadlineExceeded,
		"deadline exceeded",
		"retry with a longer deadline"},
	{LayoutConflict, 6006, grpcFailedPrecondition,
		"layout conflicts with the cached pages",
		"register the layout the host holds pages for, or register with reset to forget every cached page"},

	{Internal, 9001, grpcInternal,
		"internal error",
		"report it with the detail; the request may be retried"},
}

// Sentinels for errors.Is, one per code.
var (
	ErrBadRequest          = &Error{Code: BadRequest, Index: -1}
	ErrPayloadTooLarge     = &Error{Code: PayloadTooLarge, Index: -1}
	ErrUnknownVerb         = &Error{Code: UnknownVerb, Index: -1}
	ErrTooMany             = &Error{Code: TooMany, Index: -1}
	ErrInvalidHash         = &Error{Code: InvalidHash, Index: -1}
	ErrInvalidTTL          = &Error{Code: InvalidTTL, Index: -1}
	ErrInvalidTier         = &Error{Code: InvalidTier, Index: -1}
	ErrInvalidSpan         = &Error{Code: InvalidSpan, Index: -1}
	ErrOverlappingSpans    = &Error{Code: OverlappingSpans, Index: -1}
	ErrSinkProtected       = &Error{Code: SinkProtected, Index: -1}
	ErrInvalidPriority     = &Error{Code: InvalidPriority, Index: -1}
	ErrInvalidLease        = &Error{Code: InvalidLease, Index: -1}
	ErrMissingField        = &Error{Code: MissingField, Index: -1}
	ErrInvalidLayout       = &Error{Code: InvalidLayout, Index: -1}
	ErrInvalidSlot         = &Error{Code: InvalidSlot, Index: -1}
	ErrUnknownBlock        = &Error{Code: UnknownBlock, Index: -1}
	ErrUnknownSession      = &Error{Code: UnknownSession, Index: -1}
	ErrUnknownLease        = &Error{Code: UnknownLease, Index: -1}
	ErrLeaseExists         = &Error{Code: LeaseExists, Index: -1}
	ErrWrongWorker         = &Error{Code: WrongWorker, Index: -1}
	ErrUnknownRequest      = &Error{Code: UnknownRequest, Index: -1}
	ErrUnknownRegistration = &Error{Code: UnknownRegistration, Index: -1}
	ErrPinBudgetExhausted  = &Error{Code: PinBudgetExhausted, Index: -1}
	ErrTenantQuota         = &Error{Code: TenantQuota, Index: -1}
	ErrRateLimited         = &Error{Code: RateLimited, Index: -1}
	ErrCapacityExhausted   = &Error{Code: CapacityExhausted, Index: -1}
	ErrTenantMismatch      = &Error{Code: TenantMismatch, Index: -1}
	ErrPermissionDenied    = &Error{Code: PermissionDenied, Index: -1}
	ErrNotSupportedYet     = &Error{Code: NotSupportedYet, Index: -1}
	ErrTurnAborted         = &Error{Code: TurnAborted, Index: -1}
	ErrBlockLocked         = &Error{Code: BlockLocked, Index: -1}
	ErrUnavailable         = &Error{Code: Unavailable, Index: -1}
	ErrDeadlineExceeded    = &Error{Code: DeadlineExceeded, Index: -1}
	ErrLayoutConflict      = &Error{Code: LayoutConflict, Index: -1}
	ErrInternal            = &Error{Code: Internal, Index: -1}
)
