// Package ratelimit limits directive commands per source (a NATS reply
// inbox's client, a socket peer, a policy) with token buckets, so one noisy
// router cannot starve the others.
package ratelimit

import (
	"fmt"
	"sync"
	"time"
)

// Limiter holds one token bucket per source. Sources idle for longer than it
// takes to refill are forgotten, so the map stays bounded by active sources.
type Limiter struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	lastGC  time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// New returns a limiter allowing rate commands per second per source with
// bursts of burst. rate <= 0 disables limiting. now may be nil (time.Now).
func New(rate float64, burst int, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	if burst < 1 {
		burst = 1
	}
	return &Limiter{rate: rate, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// Allow takes one token from source's bucket and reports whether it had one.
// When it did not, retry says how long until it will.
func (l *Limiter) Allow(source string) (ok bool, retry time.Duration) {
	if l == nil || l.rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.gc(now)
	b := l.buckets[source]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[source] = b
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(l.burst, b.tokens+el*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// gc drops buckets that would be full again, at most once per refill period.
func (l *Limiter) gc(now time.Time) {
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	if now.Sub(l.lastGC) < full {
		return
	}
	l.lastGC = now
	for k, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, k)
		}
	}
}

// Sources reports how many sources are tracked (for tests and metrics).
func (l *Limiter) Sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// String describes the limit for error messages.
func (l *Limiter) String() string {
	return fmt.Sprintf("%g commands/s per source, burst %g", l.rate, l.burst)
}
