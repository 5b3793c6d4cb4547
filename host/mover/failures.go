package mover

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
)

// failureLogEvery bounds the "transfer failed" lines per tier pair: a tier
// that keeps failing (a full or broken disk) once wrote 1.8 MB of log in
// 35 s. Every failure is still counted (Options.OnFailure, a metric); the
// log says how many it left out since its last line.
const failureLogEvery = 5 * time.Second

// failureLog rate-limits failure lines per (kind, from, to).
type failureLog struct {
	mu   sync.Mutex
	last map[failureKey]failureLine
	now  func() time.Time
}

type failureKey struct {
	kind     cache.TransitionKind
	from, to tier.Tier
}

type failureLine struct {
	at         time.Time
	suppressed int
}

// note logs the failure of t unless a line for its kind and tier pair was
// written within failureLogEvery.
func (f *failureLog) note(log hclog.Logger, t cache.Transition, err error) {
	k := failureKey{t.Kind, t.From, destination(t)}
	f.mu.Lock()
	if f.last == nil {
		f.last = map[failureKey]failureLine{}
	}
	now := f.now()
	l := f.last[k]
	if !l.at.IsZero() && now.Sub(l.at) < failureLogEvery {
		l.suppressed++
		f.last[k] = l
		f.mu.Unlock()
		return
	}
	f.last[k] = failureLine{at: now}
	f.mu.Unlock()
	log.Warn("transfer failed", "transition", t.String(), "error", err,
		"similar_failures_not_logged", l.suppressed, "log_interval", failureLogEvery)
}

// destination is a copy's destination tier, and a drop's own tier.
func destination(t cache.Transition) tier.Tier {
	if t.Kind == cache.Drop {
		return t.From
	}
	return t.To
}
