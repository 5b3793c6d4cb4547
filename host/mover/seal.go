package mover

import (
	"fmt"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Host-tier pages are sealed. The host tier is shared memory that every
// registered engine maps (it is handed out with the device tier), so a
// stray write by an engine, or a flipped bit, would otherwise go back to
// an engine as KV. The mover records each page's xxh3 when it writes the
// page into the host tier and checks it whenever it copies the page out
// (a load-back to the device, a demotion to disk). A page that fails is a
// corrupt copy (pool.ErrCorrupt), forgotten with LoseCopy as a store's is,
// and the request that wanted it computes it instead. Stores check their
// own pages (disk and remote keep checksums); the device tier is the
// engine's to write, so it is not sealed.

// seals holds the host tier's per-slot checksums. 0 means unsealed: a
// slot no copy has written since the host started is not checked.
type seals struct {
	tier tier.Tier
	sums []atomic.Uint64
}

// newSeals returns the seals of mem's slots, or nil without a host tier.
func newSeals(mem pool.Memory) *seals {
	if mem == nil {
		return nil
	}
	return &seals{tier: mem.Tier(), sums: make([]atomic.Uint64, mem.Stats().Capacity)}
}

// covers reports whether pages of tier t are sealed here.
func (s *seals) covers(t tier.Tier) bool { return s != nil && s.tier == t }

// set seals the page just written into slot.
func (s *seals) set(slot pool.Slot, page []byte) {
	if int(slot) < len(s.sums) {
		s.sums[slot].Store(sealOf(page))
	}
}

// check compares sum, the checksum of the page read from slot, with the
// seal; the error wraps pool.ErrCorrupt.
func (s *seals) check(slot pool.Slot, sum uint64) error {
	if int(slot) >= len(s.sums) {
		return nil
	}
	want := s.sums[slot].Load()
	if want == 0 || want == sum {
		return nil
	}
	return fmt.Errorf("%s slot %d: %w: checksum %016x, sealed %016x", s.tier, slot, pool.ErrCorrupt, sum, want)
}

// sealOf is a page's checksum, never 0 (0 marks an unsealed slot).
func sealOf(page []byte) uint64 {
	if h := xxh3.Hash(page); h != 0 {
		return h
	}
	return 1
}

// sideHash is a page checksum computed beside a copy that reads the same
// page: on a goroutine of its own for a page large enough to hide it.
type sideHash struct {
	sum  uint64
	done chan struct{}
}

// sideHashMin is the page size from which hashing on the side pays.
const sideHashMin = 64 << 10

func startSideHash(page []byte) *sideHash {
	h := &sideHash{done: make(chan struct{})}
	if len(page) < sideHashMin {
		h.sum = sealOf(page)
		close(h.done)
		return h
	}
	go func() {
		h.sum = sealOf(page)
		close(h.done)
	}()
	return h
}

func (h *sideHash) wait() uint64 {
	<-h.done
	return h.sum
}
