package directive

import "github.com/kvpilot/kvpilot/sdk/errcode"

// Effect is what an applied directive did.
type Effect struct {
	// Blocks counts the blocks the verb changed: pinned, unpinned, evicted,
	// warmed, marked, purged, paused or revoked.
	Blocks int `json:"blocks"`
	// Skipped counts blocks left alone on purpose: locked by a running
	// request (Prune), already where Warm wanted them.
	Skipped int `json:"skipped,omitempty"`
	// Missing counts keys or hashes that named no cached block, for verbs
	// that act on what they find (Warm, unpin, purge).
	Missing int `json:"missing,omitempty"`
	// Tokens counts token positions affected, for span verbs.
	Tokens int64 `json:"tokens,omitempty"`
	// LeaseID is the lease a Pause granted or a lease verb acted on.
	LeaseID string `json:"lease_id,omitempty"`
	// TTL is the TTL granted after the host's default and clamps.
	TTL TTL `json:"ttl_seconds,omitempty"`
}

// Result is the answer for one directive of a turn.
type Result struct {
	Index  int            `json:"index"`
	Verb   Verb           `json:"verb"`
	Status string         `json:"status"` // StatusOK or StatusError
	Effect Effect         `json:"effect"`
	Error  *errcode.Error `json:"error,omitempty"`
}

// OK reports whether the directive was applied.
func (r Result) OK() bool { return r.Status == StatusOK }

// TurnReply is the answer to a turn: one Result per directive, in order.
// Status is StatusOK only when every directive was applied; otherwise none
// was, Error is the turn's failure, and each result says why it failed or
// that it was aborted because another failed.
type TurnReply struct {
	Status   string         `json:"status"`
	TurnID   string         `json:"turn_id,omitempty"`
	Results  []Result       `json:"results"`
	Error    *errcode.Error `json:"error,omitempty"`
	WorkerID WorkerID       `json:"worker_id,omitempty"`
}

// OK reports whether the turn was applied.
func (r TurnReply) OK() bool { return r.Status == StatusOK }
