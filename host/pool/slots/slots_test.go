package slots

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/kvpilot/kvpilot/host/pool"
)

func newAlloc(t testing.TB, n int) *Allocator {
	t.Helper()
	a, err := New(n)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAllocFree(t *testing.T) {
	a := newAlloc(t, 4)
	got, err := a.Alloc(nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 0 || got[1] != 1 || got[2] != 2 {
		t.Fatalf("fresh allocator handed out %v, want ascending from 0", got)
	}
	if c, u, f := a.Stats(); c != 4 || u != 3 || f != 1 {
		t.Fatalf("stats %d/%d/%d", c, u, f)
	}
	if _, err := a.Alloc(nil, 2); !errors.Is(err, pool.ErrFull) {
		t.Fatalf("over-allocation: %v", err)
	}
	if _, u, _ := a.Stats(); u != 3 {
		t.Fatal("failed Alloc changed accounting")
	}
	if err := a.Free(got[0], 9); !errors.Is(err, pool.ErrBadSlot) {
		t.Fatalf("free out of range: %v", err)
	}
	if err := a.Free(got[0], got[0]); !errors.Is(err, pool.ErrDoubleFree) {
		t.Fatalf("free listed twice: %v", err)
	}
	if !a.Allocated(got[0]) {
		t.Fatal("failed Free freed a slot")
	}
	if err := a.Free(got...); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(got[1]); !errors.Is(err, pool.ErrDoubleFree) {
		t.Fatalf("double free: %v", err)
	}
	if _, u, f := a.Stats(); u != 0 || f != 4 {
		t.Fatalf("after free: used %d free %d", u, f)
	}
	if _, err := New(-1); err == nil {
		t.Fatal("negative capacity accepted")
	}
}

func TestReserve(t *testing.T) {
	a := newAlloc(t, 8)
	for _, s := range []pool.Slot{5, 0, 7} {
		if err := a.Reserve(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Reserve(5); !errors.Is(err, pool.ErrBadSlot) {
		t.Fatalf("reserve twice: %v", err)
	}
	got, err := a.Alloc(nil, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		if s == 5 || s == 0 || s == 7 {
			t.Fatalf("reserved slot %d handed out again", s)
		}
	}
	if _, err := a.Alloc(nil, 1); !errors.Is(err, pool.ErrFull) {
		t.Fatal("allocator not full after reserve+alloc of everything")
	}
}

// TestRandomOps is a property test against a model: a set of allocated
// slots. Every op must agree with the model; the invariants build also
// checks the internal structure after each op.
func TestRandomOps(t *testing.T) {
	const n = 64
	a := newAlloc(t, n)
	held := map[pool.Slot]bool{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		switch r.IntN(3) {
		case 0:
			k := r.IntN(5)
			got, err := a.Alloc(nil, k)
			if k > n-len(held) {
				if !errors.Is(err, pool.ErrFull) {
					t.Fatalf("op %d: alloc %d with %d free: %v", i, k, n-len(held), err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range got {
				if held[s] {
					t.Fatalf("op %d: slot %d handed out twice", i, s)
				}
				held[s] = true
			}
		case 1:
			var batch []pool.Slot
			for s := range held {
				batch = append(batch, s)
				if len(batch) == 3 {
					break
				}
			}
			if err := a.Free(batch...); err != nil {
				t.Fatal(err)
			}
			for _, s := range batch {
				delete(held, s)
			}
		case 2:
			s := pool.Slot(r.IntN(n))
			err := a.Reserve(s)
			if held[s] != (err != nil) {
				t.Fatalf("op %d: reserve %d held=%v err=%v", i, s, held[s], err)
			}
			held[s] = true
		}
		if _, u, _ := a.Stats(); int(u) != len(held) {
			t.Fatalf("op %d: used %d, model %d", i, u, len(held))
		}
	}
}

func TestConcurrent(t *testing.T) {
	a := newAlloc(t, 1024)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []pool.Slot
			for i := 0; i < 2000; i++ {
				var err error
				buf, err = a.Alloc(buf[:0], 16)
				if err != nil {
					t.Error(err)
					return
				}
				if err := a.Free(buf...); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if _, u, _ := a.Stats(); u != 0 {
		t.Fatalf("used %d after balanced alloc/free", u)
	}
}

func BenchmarkAllocFree(b *testing.B) {
	a := newAlloc(b, 1<<16)
	buf := make([]pool.Slot, 0, 16)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = a.Alloc(buf[:0], 16)
		_ = a.Free(buf...)
	}
}
