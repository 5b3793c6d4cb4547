package cache

import "time"

// SweepResult reports what a sweep expired.
type SweepResult struct {
	Pins    int // pages whose pin lapsed
	Leases  int // leases that lapsed (their pages became ordinary)
	Expired []string
}

// Sweep clears lapsed pins and ends lapsed leases as of now. Pins also
// lapse lazily whenever an operation meets them, and retention needs no
// sweep (eviction compares its expiry), so the host calls Sweep on a
// periodic tick to release budget and report lapsed leases.
func (ix *Index) Sweep(now time.Duration) SweepResult {
	res := SweepResult{Pins: ix.sweepPins(now)}
	for i := 0; i < len(ix.leaseOrder); {
		l := ix.leaseOrder[i]
		if now >= l.expiry {
			ix.endLease(l) // removes l from leaseOrder
			res.Leases++
			res.Expired = append(res.Expired, l.id)
			continue
		}
		i++
	}
	ix.afterMutation()
	return res
}
