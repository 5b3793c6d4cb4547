package cache

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/tier"
)

// FetchResult reports a PlanFetch.
type FetchResult struct {
	// Planned counts copies planned.
	Planned int
	// Already counts pages already on (or being copied to) the tier.
	Already int
	// Skipped counts pages that cannot be copied now: transient pages bound
	// for a colder tier, pages whose every copy is being dropped, and the
	// descendants of a skipped page.
	Skipped int
	// Unknown counts requested blocks that are not cached.
	Unknown int
}

// PlanFetch plans copies that bring the target pages and their ancestors
// onto tier to: Warm (from disk or remote into host or device) and the
// load-back of a match from colder tiers. Each copy reads the hottest copy
// and waits (After) for its parent's copy. The transitions are appended to
// dst; the mover runs them like Plan's.
func (ix *Index) PlanFetch(t Target, to tier.Tier, dst []Transition) ([]Transition, FetchResult, error) {
	if !to.Valid() || !ix.present(to) {
		return dst, FetchResult{}, fmt.Errorf("fetch %s: tier %s is not present: %w", t, to, ErrBadArgument)
	}
	nodes, unknown := ix.resolve(t)
	res := FetchResult{Unknown: unknown}
	if len(nodes) == 0 {
		return dst, res, unknownErr("fetch", t, unknown)
	}
	for _, n := range ix.closureOf(nodes) { // ancestors first
		if n.resident.Has(to) || n.inbound.Has(to) {
			res.Already++
			continue
		}
		after, parentOK := parentReady(n, to)
		src, srcOK := copySource(n)
		if !parentOK || !srcOK || (n.transient && to.Colder(src)) {
			res.Skipped++
			continue
		}
		dst = append(dst, ix.reserve(n, Copy, ReasonFetch, src, to, after))
		res.Planned++
	}
	ix.afterMutation()
	return dst, res, nil
}
