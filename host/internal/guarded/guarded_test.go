package guarded

import (
	"testing"
	"time"

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

// Every way in hands back the one index it wraps: a door that got another
// one would be working on a copy no one else sees.
func TestOneIndex(t *testing.T) {
	ix := newIndex(t)
	g := New(ix)
	if got := g.Lock(); got != ix {
		t.Errorf("Lock returned %p, want %p", got, ix)
	}
	g.Unlock()
	if got := g.Held(); got != ix {
		t.Errorf("Held returned %p, want %p", got, ix)
	}
	g.Do(func(got *cache.Index) {
		if got != ix {
			t.Errorf("Do passed %p, want %p", got, ix)
		}
	})
}

// Lock and Do take the same lock: Do must wait for a Lock held elsewhere,
// and run once it is released.
func TestDoWaitsForLock(t *testing.T) {
	g := New(newIndex(t))
	g.Lock()
	ran := make(chan struct{})
	go g.Do(func(*cache.Index) { close(ran) })
	select {
	case <-ran:
		t.Fatal("Do ran while the lock was held")
	case <-time.After(50 * time.Millisecond):
	}
	g.Unlock()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("Do did not run after Unlock")
	}
}

// A panic inside Do must not leave the index locked for everyone else.
func TestDoUnlocksOnPanic(t *testing.T) {
	g := New(newIndex(t))
	func() {
		defer func() { _ = recover() }()
		g.Do(func(*cache.Index) { panic("boom") })
	}()
	done := make(chan struct{})
	go func() { g.Lock(); g.Unlock(); close(done) }()
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
