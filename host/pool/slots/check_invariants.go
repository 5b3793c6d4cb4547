//go:build invariants

package slots

import "fmt"

// check verifies that free and pos describe each other exactly. It is
// O(capacity), so it only runs in invariants builds. Called with mu held.
func (a *Allocator) check() {
	if len(a.free) > len(a.pos) {
		panic(fmt.Sprintf("slots: %d free of capacity %d", len(a.free), len(a.pos)))
	}
	freeCount := 0
	for s, p := range a.pos {
		if p == notFree {
			continue
		}
		freeCount++
		if int(p) >= len(a.free) || a.free[p] != uint32(s) {
			panic(fmt.Sprintf("slots: pos[%d]=%d does not point back", s, p))
		}
	}
	if freeCount != len(a.free) {
		panic(fmt.Sprintf("slots: %d slots marked free, stack holds %d", freeCount, len(a.free)))
	}
}
