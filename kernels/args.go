package kernels

import (
	"fmt"
	"slices"
	"sync"
)

// CheckRotate validates Rotate's arguments against layout l.
func CheckRotate(l *Layout, slots, deltas []int) error {
	if len(slots) != len(deltas) {
		return fmt.Errorf("rotate: %d slots but %d deltas: %w", len(slots), len(deltas), ErrArgs)
	}
	if err := checkSlots("rotate", slots, l.spec.Slots); err != nil {
		return err
	}
	if err := checkDeltas("rotate", deltas); err != nil {
		return err
	}
	if i, j, dup := firstDuplicate(slots, l.spec.Slots); dup {
		return fmt.Errorf("rotate: slot %d appears at %d and %d: %w", slots[i], i, j, ErrArgs)
	}
	return nil
}

// CheckGatherRotateScatter validates GatherRotateScatter's arguments on one
// arena of layout l and reports whether the move must stage its sources.
func CheckGatherRotateScatter(l *Layout, src, dst, deltas []int) (stage bool, err error) {
	const op = "gather-rotate-scatter"
	if len(deltas) != len(src) {
		return false, fmt.Errorf("%s: %d slots but %d deltas: %w", op, len(src), len(deltas), ErrArgs)
	}
	return CheckMove(op, l, dst, l, src, deltas, true)
}

// CheckMove validates a row move (GatherRotateScatter with deltas, Copy
// with deltas nil) from layout srcL to dstL. sameArena says both sides are
// one arena; then it reports whether some destination is also a source that
// another pair reads, in which case the move must stage its sources first.
func CheckMove(op string, dstL *Layout, dst []int, srcL *Layout, src []int, deltas []int, sameArena bool) (stage bool, err error) {
	if len(src) != len(dst) {
		return false, fmt.Errorf("%s: %d sources but %d destinations: %w", op, len(src), len(dst), ErrArgs)
	}
	if deltas != nil && len(deltas) != len(src) {
		return false, fmt.Errorf("%s: %d slots but %d deltas: %w", op, len(src), len(deltas), ErrArgs)
	}
	if err := dstL.compatible(srcL); err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	if err := checkSlots(op+" source", src, srcL.spec.Slots); err != nil {
		return false, err
	}
	if err := checkSlots(op+" destination", dst, dstL.spec.Slots); err != nil {
		return false, err
	}
	if err := checkDeltas(op, deltas); err != nil {
		return false, err
	}
	if i, j, dup := firstDuplicate(dst, dstL.spec.Slots); dup {
		return false, fmt.Errorf("%s: destination slot %d appears at %d and %d: %w", op, dst[i], i, j, ErrArgs)
	}
	if !sameArena {
		return false, nil
	}
	return needsStaging(src, dst), nil
}

func checkSlots(op string, slots []int, n int) error {
	for i, s := range slots {
		if s < 0 || s >= n {
			return fmt.Errorf("%s: slot %d at index %d is outside [0, %d): %w", op, s, i, n, ErrArgs)
		}
	}
	return nil
}

func checkDeltas(op string, deltas []int) error {
	for i, d := range deltas {
		if d > MaxDelta || d < -MaxDelta {
			return fmt.Errorf("%s: delta %d at index %d exceeds ±%d: %w", op, d, i, MaxDelta, ErrArgs)
		}
	}
	return nil
}

// dupScratch is firstDuplicate's reusable working memory, so validating a
// call allocates nothing in the steady state.
type dupScratch struct {
	seen   []uint64
	sorted []int
}

var dupPool = sync.Pool{New: func() any { return new(dupScratch) }}

// firstDuplicate finds two equal entries of slots (all in [0, n)). It uses
// a bitmap when that is small next to the list, else a sorted copy.
func firstDuplicate(slots []int, n int) (i, j int, dup bool) {
	if len(slots) < 2 {
		return 0, 0, false
	}
	sc := dupPool.Get().(*dupScratch)
	defer dupPool.Put(sc)
	if n/64 <= 4*len(slots) {
		words := (n + 63) / 64
		if cap(sc.seen) < words {
			sc.seen = make([]uint64, words)
		}
		seen := sc.seen[:words]
		clear(seen)
		for k, s := range slots {
			if seen[s/64]&(1<<(s%64)) != 0 {
				return slices.Index(slots, s), k, true
			}
			seen[s/64] |= 1 << (s % 64)
		}
		return 0, 0, false
	}
	sorted := append(sc.sorted[:0], slots...)
	sc.sorted = sorted
	slices.Sort(sorted)
	for k := 1; k < len(sorted); k++ {
		if sorted[k] == sorted[k-1] {
			s := sorted[k]
			first := slices.Index(slots, s)
			return first, first + 1 + slices.Index(slots[first+1:], s), true
		}
	}
	return 0, 0, false
}

// needsStaging reports whether writing dst[j] could clobber a source that a
// pair other than j reads. A pair moving a slot onto itself is safe unless
// another pair also reads that slot.
func needsStaging(src, dst []int) bool {
	readers := make(map[int]int, len(src))
	for _, s := range src {
		readers[s]++
	}
	for j, d := range dst {
		n := readers[d]
		if n == 0 || (n == 1 && src[j] == d) {
			continue
		}
		return true
	}
	return false
}

// DeltaIndexInto groups deltas by value into caller-owned storage: distinct
// lists each distinct Δ once, in order of first appearance, and index[i] is
// deltas[i]'s position in distinct. Kernels compute one cos/sin table per
// distinct Δ. With skipZero, Δ = 0 gets index -1 and no table (a kernel
// that leaves those rows untouched). distinct and index are appended to
// (pass them empty); pos is cleared and used as scratch.
func DeltaIndexInto(distinct []int, index []int32, pos map[int]int32, deltas []int, skipZero bool) ([]int, []int32) {
	clear(pos)
	if cap(index) < len(deltas) {
		index = make([]int32, 0, len(deltas))
	}
	index = index[:len(deltas)]
	for i, d := range deltas {
		if i > 0 && d == deltas[i-1] {
			index[i] = index[i-1] // the common case: one Δ for a whole run
			continue
		}
		if skipZero && d == 0 {
			index[i] = -1
			continue
		}
		k, ok := pos[d]
		if !ok {
			k = int32(len(distinct))
			pos[d] = k
			distinct = append(distinct, d)
		}
		index[i] = k
	}
	return distinct, index
}
