package policy

import (
	"fmt"
	"time"

	"github.com/kvpilot/kvpilot/sdk/chat"
)

// Kind is an observation kind; a policy subscribes to kinds in Info.
type Kind uint8

const (
	KindRequestStarted  Kind = 1 // a request matched against the cache
	KindRequestFinished Kind = 2 // a request completed, with usage
	KindKVEvent         Kind = 3 // blocks stored or removed on a tier
	KindTick            Kind = 4 // the periodic clock
	KindTierPressure    Kind = 5 // a tier's occupancy crossed its watermark
)

// Kinds lists every kind.
var Kinds = []Kind{KindRequestStarted, KindRequestFinished, KindKVEvent, KindTick, KindTierPressure}

var kindNames = map[Kind]string{
	KindRequestStarted:  "request_started",
	KindRequestFinished: "request_finished",
	KindKVEvent:         "kv_event",
	KindTick:            "tick",
	KindTierPressure:    "tier_pressure",
}

func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool { _, ok := kindNames[k]; return ok }

// Observation is one thing the host saw. Exactly one of the body pointers is
// set, the one Kind names.
type Observation struct {
	// Seq numbers the observations the host accepted, across all kinds.
	Seq uint64
	// Time is the host's clock when it made the observation. Policies use
	// it, not time.Now, so that tests and replays are deterministic.
	Time    time.Time
	Kind    Kind
	Session string // "" for ticks, tier pressure and KV events
	Tenant  string

	Started  *RequestStarted
	Finished *RequestFinished
	KV       *KVEvent
	Tick     *Tick
	Pressure *TierPressure
}

// RequestStarted reports a request entering the engine.
type RequestStarted struct {
	RequestID    string
	Turn         int64 // the session's request count, from 0
	PromptTokens int64
	PageSize     uint32
	// BlockHashes are the sequence hashes of the prompt's full pages, root
	// first.
	BlockHashes []uint64
	// Messages are the prompt's chat messages; their spans index the
	// session's cached token sequence as it stands when the observation is
	// made (the host has already accounted for edits it applied), so a
	// policy can put the positions straight into a Splice.
	Messages []chat.Message
}

// Usage is a finished request's token accounting.
type Usage struct {
	InputTokens     int64
	CachedTokens    int64
	OutputTokens    int64
	ReasoningTokens int64
}

// CacheControl is the request's Anthropic or nvext cache_control,
// {type:"ephemeral", ttl}; Type is "" when the request had none.
type CacheControl struct {
	Type string
	TTL  time.Duration
}

// RequestFinished reports a request's completion.
type RequestFinished struct {
	RequestID    string
	Usage        Usage
	CacheControl CacheControl
	// BlockHashes are the sequence hashes of the full pages now cached for
	// the session (prompt and output), root first.
	BlockHashes []uint64
	// ReasoningBlocks are the sequence hashes of output pages that hold
	// only reasoning tokens: candidates for a transient mark.
	ReasoningBlocks []uint64
}

// KVEventType says what happened to the blocks of a KVEvent.
type KVEventType uint8

const (
	KVStored  KVEventType = 1
	KVRemoved KVEventType = 2
	KVCleared KVEventType = 3
)

func (t KVEventType) String() string {
	switch t {
	case KVStored:
		return "stored"
	case KVRemoved:
		return "removed"
	case KVCleared:
		return "cleared"
	}
	return fmt.Sprintf("kv_event_type(%d)", uint8(t))
}

// KVEvent mirrors a host KV event: blocks stored on or
// removed from a tier, or the tier cleared.
type KVEvent struct {
	Type KVEventType
	Tier string // device, host, disk, remote
	// Parent is the stored run's parent block, when HasParent.
	Parent      uint64
	HasParent   bool
	BlockHashes []uint64
}

// Tick is the host's periodic clock; Observation.Time carries the time.
type Tick struct {
	Interval time.Duration
}

// TierPressure reports a tier's occupancy.
type TierPressure struct {
	Tier          string
	UsedPages     int64
	CapacityPages int64
	HighWatermark float64
}

// Fraction returns UsedPages / CapacityPages, or 0 for an empty tier.
func (p TierPressure) Fraction() float64 {
	if p.CapacityPages <= 0 {
		return 0
	}
	return float64(p.UsedPages) / float64(p.CapacityPages)
}

// Check reports what is wrong with obs, or nil: its kind must be known and
// its body must match its kind.
func (obs Observation) Check() error {
	want := map[Kind]bool{
		KindRequestStarted: obs.Started != nil, KindRequestFinished: obs.Finished != nil,
		KindKVEvent: obs.KV != nil, KindTick: obs.Tick != nil, KindTierPressure: obs.Pressure != nil,
	}
	set := 0
	for _, ok := range want {
		if ok {
			set++
		}
	}
	switch {
	case !obs.Kind.Valid():
		return fmt.Errorf("observation %d: unknown kind %v", obs.Seq, obs.Kind)
	case set != 1 || !want[obs.Kind]:
		return fmt.Errorf("observation %d: kind %v needs exactly its own body set", obs.Seq, obs.Kind)
	}
	return nil
}
