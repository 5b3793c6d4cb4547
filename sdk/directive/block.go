package directive

import (
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Warm fetches blocks from a colder tier (disk, remote) into TargetTier.
// Keys that name no block are counted as missing, not refused.
type Warm struct {
	BlockKeys  []BlockKey `json:"block_keys"`
	TargetTier string     `json:"target_tier"` // see ParseTierName
}

// Prune evicts every descendant of a block from every tier, keeping the
// block itself. Locked pages are skipped and counted.
type Prune struct {
	AfterBlockHash Hash `json:"after_block_hash"`
}

// Cache pins (Pin true) or unpins (Pin false) blocks. Pinning a block pins
// its ancestors. TTL is a kvpilot extension of the AgenticCommand format: absent or
// zero takes the host's default pin TTL.
type Cache struct {
	BlockHashes []Hash `json:"block_hashes"`
	Pin         bool   `json:"pin"`
	TTL         *TTL   `json:"ttl_seconds,omitempty"`
}

// Think marks blocks transient (never backed up) when Transient is true, and
// purges them at once when it is false. Purging an interior span is a splice
// with an empty replacement.
type Think struct {
	BlockHashes []Hash `json:"block_hashes"`
	Transient   bool   `json:"transient"`
}

// Pause copies blocks to the pause tier, frees their hotter copies and
// records lease LeaseID. A nil TTL is an indefinite lease (the command's null).
type Pause struct {
	BlockHashes []Hash `json:"block_hashes"`
	TTL         *TTL   `json:"ttl_seconds"`
	LeaseID     string `json:"lease_id"`
}

// RenewLease sets an existing lease's TTL to NewTTL from now.
type RenewLease struct {
	LeaseID string `json:"lease_id"`
	NewTTL  TTL    `json:"new_ttl_seconds"`
}

// RevokeLease ends a lease and purges its blocks from every tier.
type RevokeLease struct {
	LeaseID string `json:"lease_id"`
}

func (Warm) Verb() Verb        { return VerbWarm }
func (Prune) Verb() Verb       { return VerbPrune }
func (Cache) Verb() Verb       { return VerbCache }
func (Think) Verb() Verb       { return VerbThink }
func (Pause) Verb() Verb       { return VerbPause }
func (RenewLease) Verb() Verb  { return VerbRenewLease }
func (RevokeLease) Verb() Verb { return VerbRevokeLease }

func (Warm) isDirective()        {}
func (Prune) isDirective()       {}
func (Cache) isDirective()       {}
func (Think) isDirective()       {}
func (Pause) isDirective()       {}
func (RenewLease) isDirective()  {}
func (RevokeLease) isDirective() {}

// Validate checks Warm on its own.
func (d Warm) Validate(l Limits) error {
	if len(d.BlockKeys) == 0 {
		return errcode.New(errcode.MissingField, "Warm.block_keys is empty")
	}
	if len(d.BlockKeys) > l.maxHashes() {
		return errcode.New(errcode.TooMany, "Warm: %d block_keys, limit %d", len(d.BlockKeys), l.maxHashes())
	}
	for i, k := range d.BlockKeys {
		if err := k.validate(); err != nil {
			e, _ := errcode.As(err)
			e.Detail = "Warm.block_keys[" + itoa(i) + "]: " + e.Detail
			return e
		}
	}
	if d.TargetTier == "" {
		return errcode.New(errcode.MissingField, "Warm.target_tier")
	}
	if _, err := ParseTierName(d.TargetTier); err != nil {
		return err
	}
	return nil
}

// Validate checks Prune on its own (any 64-bit value is a possible hash).
func (d Prune) Validate(Limits) error { return nil }

// Validate checks Cache on its own.
func (d Cache) Validate(l Limits) error {
	return checkHashes("Cache", d.BlockHashes, l)
}

// Validate checks Think on its own.
func (d Think) Validate(l Limits) error {
	return checkHashes("Think", d.BlockHashes, l)
}

// Validate checks Pause on its own.
func (d Pause) Validate(l Limits) error {
	if err := checkHashes("Pause", d.BlockHashes, l); err != nil {
		return err
	}
	return checkLeaseID("Pause", d.LeaseID)
}

// Validate checks RenewLease on its own.
func (d RenewLease) Validate(Limits) error { return checkLeaseID("RenewLease", d.LeaseID) }

// Validate checks RevokeLease on its own.
func (d RevokeLease) Validate(Limits) error { return checkLeaseID("RevokeLease", d.LeaseID) }

func checkHashes(verb string, hs []Hash, l Limits) error {
	if len(hs) == 0 {
		return errcode.New(errcode.MissingField, "%s.block_hashes is empty", verb)
	}
	if len(hs) > l.maxHashes() {
		return errcode.New(errcode.TooMany, "%s: %d block_hashes, limit %d", verb, len(hs), l.maxHashes())
	}
	return nil
}

// MaxLeaseIDLen bounds a lease id; ids are logged and persisted.
const MaxLeaseIDLen = 128

func checkLeaseID(verb, id string) error {
	switch {
	case id == "":
		return errcode.New(errcode.MissingField, "%s.lease_id", verb)
	case len(id) > MaxLeaseIDLen || !printable(id):
		return errcode.New(errcode.InvalidLease, "%s.lease_id %s", verb, quoteShort(id))
	}
	return nil
}

// TierName is a tier as the directive format spells it, normalized to the
// config names device, host, disk, remote.
type TierName string

// ParseTierName accepts the config names, the KV event names (host_pinned,
// external) and the AgenticCommand's GPU and CPU_TIER1. It mirrors host/tier.Parse,
// which sdk may not import; the executor's tests hold the two in step.
func ParseTierName(s string) (TierName, error) {
	switch s {
	case "device", "GPU":
		return "device", nil
	case "host", "host_pinned", "CPU_TIER1":
		return "host", nil
	case "disk":
		return "disk", nil
	case "remote", "external":
		return "remote", nil
	}
	return "", errcode.New(errcode.InvalidTier, "%s", quoteShort(s))
}
