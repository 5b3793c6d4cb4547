package directive

import (
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Checks shared by the block verbs (verb_warm.go ... verb_revokelease.go).

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
