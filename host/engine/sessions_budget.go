package engine

import (
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Bounds of the bytes the session table may hold (sessionBudget).
const (
	// sessionBytesPerToken: a cached token's 4 bytes in Tokens, about as
	// many of message text, a share of the page hashes.
	sessionBytesPerToken = 10
	// sessionTokensPerCached: sessions share prefixes, so together they
	// describe more tokens than the cache holds; beyond this many times
	// what every tier can hold, the oldest describe pages long evicted.
	sessionTokensPerCached = 4
	minSessionBytes        = 64 << 20
)

// sessionBudget is the bytes the session table may hold for an index of cfg:
// enough to describe what its tiers can cache several times over, at
// least 64 MiB. The session count bound (engine.max_sessions) alone let a
// host replaying long sessions grow by hundreds of MiB a minute.
func sessionBudget(cfg cache.Config) int64 {
	var pages int64
	for _, t := range tier.All {
		pages += int64(cfg.Tiers[t].Capacity)
	}
	return max(minSessionBytes, pages*int64(cfg.PageSize)*sessionBytesPerToken*sessionTokensPerCached)
}
