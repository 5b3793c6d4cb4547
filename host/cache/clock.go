package cache

import (
	"sync"
	"time"
)

// Clock is the index's only source of time: a monotonic reading since an
// arbitrary origin. Injecting it keeps the index deterministic (tests drive a
// ManualClock) and lets pins, retention and leases share one timeline.
type Clock interface {
	Now() time.Duration
}

// ManualClock is a Clock that moves only when told to. It is safe for
// concurrent use so a test can advance it while other goroutines read it.
type ManualClock struct {
	mu  sync.Mutex
	now time.Duration
}

// NewManualClock returns a clock reading start.
func NewManualClock(start time.Duration) *ManualClock { return &ManualClock{now: start} }

// Now returns the current reading.
func (c *ManualClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d; a negative d is ignored because a
// monotonic clock never goes back.
func (c *ManualClock) Advance(d time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now += d
	}
	return c.now
}

// MonotonicClock reads the process's monotonic clock relative to its
// creation. It is the production clock; the index itself never calls
// time.Now.
type MonotonicClock struct{ origin time.Time }

// NewMonotonicClock starts a clock at zero now.
func NewMonotonicClock() MonotonicClock { return MonotonicClock{origin: time.Now()} }

// Now returns the time elapsed since the clock was created.
func (c MonotonicClock) Now() time.Duration { return time.Since(c.origin) }
