package directive

import "github.com/kvpilot/kvpilot/sdk/errcode"

// Effect is what an applied directive did.
type Effect struct {
	// Blocks counts the blocks the verb changed: pinned, unpinned, evicted,
	// warmed, marked, purged, paused or revoked.
	Blocks int `json:"blocks"`
	// Skipped counts blocks left alone on purpose: locked by a running
	// request (Prune), already where Warm wanted them. Skips says why, one
	// entry per reason; its blocks add up to Skipped.
	Skipped int    `json:"skipped,omitempty"`
	Skips   []Skip `json:"skips,omitempty"`
	// Missing counts keys or hashes that named no cached block, for verbs
	// that act on what they find (Warm, unpin, purge).
	Missing int `json:"missing,omitempty"`
	// Tokens counts token positions affected, for span verbs.
	Tokens int64 `json:"tokens,omitempty"`
	// LeaseID is the lease a Pause granted or a lease verb acted on.
	LeaseID string `json:"lease_id,omitempty"`
	// TTL is the TTL granted after the host's default and clamps.
	TTL TTL `json:"ttl_seconds,omitempty"`
	// RecomputedTokens counts the kept tokens a splice recomputes as
	// planned when the reply is written (those after each edit, and the
	// engine's share), of RecomputeRegion kept tokens after its first edit.
	// The quality guard's own choice comes later, from the engine.
	RecomputedTokens int64 `json:"recomputed_tokens,omitempty"`
	RecomputeRegion  int64 `json:"recompute_region,omitempty"`
}

// SkipReason says why a verb left a block alone.
type SkipReason string

// Skip reasons, as clients see them in Effect.Skips.
const (
	// SkipLocked: a running request holds the block; it stays until released.
	SkipLocked SkipReason = "locked"
	// SkipPinned: the block is pinned (by this or another session).
	SkipPinned SkipReason = "pinned"
	// SkipLeased: another lease holds the block too.
	SkipLeased SkipReason = "leased"
	// SkipShared: other sessions' blocks hang under it (a shared prefix),
	// so it stays as an ordinary block.
	SkipShared SkipReason = "shared"
	// SkipAncestor: a block it keeps below was skipped, so it stays too.
	SkipAncestor SkipReason = "ancestor"
	// SkipAlready: the block already is where the verb wanted it.
	SkipAlready SkipReason = "already"
	// SkipTransient: a transient block is never copied to a colder tier.
	SkipTransient SkipReason = "transient"
	// SkipNotPinned: an unpin found the block not pinned.
	SkipNotPinned SkipReason = "not_pinned"
	// SkipNotTransient: a purge found the block not transient.
	SkipNotTransient SkipReason = "not_transient"
	// SkipInterior: a purge left an interior block to the splice that
	// removes it.
	SkipInterior SkipReason = "interior"
)

// Skip counts the blocks a verb left alone for one reason.
type Skip struct {
	Reason SkipReason `json:"reason"`
	Blocks int        `json:"blocks"`
}

// Skip adds n blocks skipped for reason (nothing when n is 0), keeping
// Skipped the sum of Skips.
func (e *Effect) Skip(reason SkipReason, n int) {
	if n <= 0 {
		return
	}
	e.Skipped += n
	for i := range e.Skips {
		if e.Skips[i].Reason == reason {
			e.Skips[i].Blocks += n
			return
		}
	}
	e.Skips = append(e.Skips, Skip{Reason: reason, Blocks: n})
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
	// Warning is set on a turn applied in full whose effect is less safe
	// than its ok promises: its pins or leases could not be saved to disk,
	// so a restart now would lose them. The turn is not to be resent (a
	// pin would be counted twice); the operator should look at the host.
	Warning string `json:"warning,omitempty"`
}

// OK reports whether the turn was applied.
func (r TurnReply) OK() bool { return r.Status == StatusOK }
