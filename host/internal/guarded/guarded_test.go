package guarded

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
)

func newIndex(t *testing.T) *cache.Index {
	t.Helper()
	ix, err := cache.New(cache.Config{PageSize: 4, Clock: cache.NewManualClock(time.Second),
		Tiers: [tier.Count]cache.TierConfig{tier.Device: {Capacity: 8, High: 1, Low: 1, PinFraction: 0.5}}})
	if err != nil {
		t.Fatalf("cache.New: %v", err)
	}
	return ix
}

// Do hands out the one index it wraps: a door that got another one would
// be working on a copy no one else sees.
func TestOneIndex(t *testing.T) {
	ix := newIndex(t)
	g := New(ix)
	g.Do(func(got *cache.Index) {
		if got != ix {
			t.Errorf("Do passed %p, want %p", got, ix)
		}
	})
	if g.PageSize() != ix.PageSize() || g.Salt("a") != ix.Salt("a") || g.Namespace("a") != ix.Namespace("a") {
		t.Errorf("the lock-free reads differ from the index's own")
	}
}

// Two Do calls never overlap: the second waits for the first to return.
func TestDoSerializes(t *testing.T) {
	g := New(newIndex(t))
	inside, release := make(chan struct{}), make(chan struct{})
	go g.Do(func(*cache.Index) { close(inside); <-release })
	<-inside
	ran := make(chan struct{})
	go g.Do(func(*cache.Index) { close(ran) })
	select {
	case <-ran:
		t.Fatal("Do ran while another Do held the lock")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("Do did not run after the other returned")
	}
}

// A panic inside Do must not leave the index locked for everyone else, nor
// a journal open: the pin made inside the panicking call is rolled back,
// and the next call opens a journal of its own.
func TestDoUnlocksAndRollsBackOnPanic(t *testing.T) {
	ix := newIndex(t)
	var res cache.CommitResult
	h := blockid.Compute([]uint32{1, 2, 3, 4}, 4, ix.Salt("a"))
	if err := ix.Commit("a", h, []uint64{0}, &res); err != nil {
		t.Fatal(err)
	}
	g := New(ix)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach Do's caller")
			}
		}()
		g.Do(func(ix *cache.Index) {
			ix.BeginJournal()
			if _, err := ix.Pin(cache.TargetHashes("a", h.Sequence...), time.Minute); err != nil {
				t.Error(err)
			}
			panic("boom")
		})
	}()
	done := make(chan struct{})
	go g.Do(func(ix *cache.Index) {
		defer close(done)
		if p, _ := ix.Lookup("a", h.Sequence[0]); p.PinCount != 0 {
			t.Errorf("the panicked turn's pin stayed: pin count %d", p.PinCount)
		}
		ix.BeginJournal() // panics if the panicked call's journal is still open
		ix.CommitJournal()
	})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the lock is still held after a panic in Do")
	}
}

func TestNewNilPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil) did not panic")
		}
	}()
	New(nil)
}
