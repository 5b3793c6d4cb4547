package directive

import (
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Action is a router cache_control action (Dynamo PIN integration).
type Action string

const (
	ActionPinBlocks        Action = "pin_blocks"
	ActionUnpinBlocks      Action = "unpin_blocks"
	ActionEvictDescendants Action = "evict_descendants"
	ActionPinPrefix        Action = "pin_prefix"
	ActionUnpinPrefix      Action = "unpin_prefix"
)

// Actions lists every cache_control action.
var Actions = []Action{ActionPinBlocks, ActionUnpinBlocks, ActionEvictDescendants, ActionPinPrefix, ActionUnpinPrefix}

// ByTokens reports whether the action names blocks by token ids (the host
// hashes full pages with the tenant's salt) rather than by hash.
func (a Action) ByTokens() bool { return a == ActionPinPrefix || a == ActionUnpinPrefix }

// CountField is the reply field that carries the action's count.
func (a Action) CountField() string {
	switch a {
	case ActionPinBlocks, ActionPinPrefix:
		return "pinned_count"
	case ActionUnpinBlocks, ActionUnpinPrefix:
		return "unpinned_count"
	case ActionEvictDescendants:
		return "evicted_count"
	}
	return ""
}

// CacheControl is the router's cache_control request:
//
//	{"action":"pin_blocks","block_hashes":[15310707395893867146],"worker_id":42}
//	{"action":"pin_prefix","token_ids":[1,2,3],"ttl_seconds":300}
//
// evict_descendants evicts, for every listed block, all of its descendants
// from every tier; listed blocks themselves are kept, and a block reached
// from two listed blocks counts once.
type CacheControl struct {
	Action      Action   `json:"action"`
	BlockHashes []Hash   `json:"block_hashes,omitempty"`
	TokenIDs    []uint32 `json:"token_ids,omitempty"`
	TTL         *TTL     `json:"ttl_seconds,omitempty"`
	WorkerID    WorkerID `json:"worker_id,omitempty"`
	// DPRank is accepted because routers forward it; the host has one rank.
	DPRank *int `json:"dp_rank,omitempty"`
}

// Validate checks the request on its own.
func (c CacheControl) Validate(l Limits) error {
	switch c.Action {
	case ActionPinBlocks, ActionUnpinBlocks, ActionEvictDescendants:
		if len(c.TokenIDs) > 0 {
			return errcode.New(errcode.BadRequest, "%s takes block_hashes, not token_ids", c.Action)
		}
		if err := checkHashes(string(c.Action), c.BlockHashes, l); err != nil {
			return err
		}
	case ActionPinPrefix, ActionUnpinPrefix:
		if len(c.BlockHashes) > 0 {
			return errcode.New(errcode.BadRequest, "%s takes token_ids, not block_hashes", c.Action)
		}
		if len(c.TokenIDs) == 0 {
			return errcode.New(errcode.MissingField, "%s.token_ids is empty", c.Action)
		}
		if len(c.TokenIDs) > l.maxTokens() {
			return errcode.New(errcode.TooMany, "%s: %d token_ids, limit %d", c.Action, len(c.TokenIDs), l.maxTokens())
		}
	case "":
		return errcode.New(errcode.MissingField, "action")
	default:
		return errcode.New(errcode.UnknownVerb, "action %s: want one of pin_blocks, unpin_blocks, evict_descendants, pin_prefix, unpin_prefix", quoteShort(string(c.Action)))
	}
	if c.TTL != nil && c.Action != ActionPinBlocks && c.Action != ActionPinPrefix {
		return errcode.New(errcode.BadRequest, "ttl_seconds applies to pin_blocks and pin_prefix, not %s", c.Action)
	}
	return nil
}

// Status values of a CacheControlReply.
const (
	StatusOK    = "ok"
	StatusError = "error"
)

// CacheControlReply is the answer to a CacheControl request:
//
//	{"status":"ok","pinned_count":2,"message":"Pinned 2/2 blocks","worker_id":42}
//	{"status":"error","message":"unknown_block: ...","code":"unknown_block","worker_id":42}
//
// Exactly one of the counts is set on success, chosen by the action. Code is
// a kvpilot addition for errors; routers that do not know it ignore it.
type CacheControlReply struct {
	Status        string       `json:"status"`
	PinnedCount   *int         `json:"pinned_count,omitempty"`
	UnpinnedCount *int         `json:"unpinned_count,omitempty"`
	EvictedCount  *int         `json:"evicted_count,omitempty"`
	TotalBlocks   *int         `json:"total_blocks,omitempty"` // pin_prefix/unpin_prefix: full pages in token_ids
	Message       string       `json:"message"`
	Code          errcode.Code `json:"code,omitempty"`
	WorkerID      WorkerID     `json:"worker_id,omitempty"`
}

// OKReply builds a success reply for action with count n in the action's
// count field.
func OKReply(a Action, n int, message string, worker WorkerID) CacheControlReply {
	r := CacheControlReply{Status: StatusOK, Message: message, WorkerID: worker}
	switch a.CountField() {
	case "pinned_count":
		r.PinnedCount = &n
	case "unpinned_count":
		r.UnpinnedCount = &n
	case "evicted_count":
		r.EvictedCount = &n
	}
	return r
}

// ErrorReply builds an error reply from any error; non-registry errors read
// as internal.
func ErrorReply(err error, worker WorkerID) CacheControlReply {
	e := errcode.From(err)
	return CacheControlReply{Status: StatusError, Message: e.Error(), Code: e.Code, WorkerID: worker}
}

// Count returns whichever count is set, and 0 when none is.
func (r CacheControlReply) Count() int {
	for _, p := range []*int{r.PinnedCount, r.UnpinnedCount, r.EvictedCount} {
		if p != nil {
			return *p
		}
	}
	return 0
}
