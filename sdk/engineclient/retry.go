package engineclient

import (
	"context"
	"errors"
	"time"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Retry bounds RunRequest's attempts and the waits between them.
type Retry struct {
	// Attempts in all, the first included (default 5).
	Attempts int
	// First is the first wait; each next one doubles, up to Max (defaults
	// 50ms and 2s).
	First, Max time.Duration
}

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = 5
	}
	if r.First <= 0 {
		r.First = 50 * time.Millisecond
	}
	if r.Max <= 0 {
		r.Max = 2 * time.Second
	}
	return r
}

// Restartable reports whether err ended a request because the host went
// away: it restarted under the request (ErrHostRestarted), or its socket
// was down or reset (unavailable). Such a request is run again from Match;
// any other error is the request's own.
func Restartable(err error) bool {
	if errors.Is(err, ErrHostRestarted) {
		return true
	}
	e, ok := errcode.As(err)
	return ok && e.Code == errcode.Unavailable
}

// RunRequest runs fn, a whole request from its Match, and runs it again
// from the start when the host went away under it (Restartable), waiting
// between attempts with a bounded exponential backoff while the client
// registers again. A host restart so costs the request's cache hits, never
// the engine. The last error is returned when every attempt failed.
func (c *Client) RunRequest(ctx context.Context, r Retry, fn func(context.Context) error) error {
	r = r.withDefaults()
	wait := r.First
	var err error
	for attempt := 1; ; attempt++ {
		if err = fn(ctx); err == nil || !Restartable(err) || attempt == r.Attempts {
			return err
		}
		c.log.Info("request cut by the host going away; running it again", "attempt", attempt, "wait", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, r.Max)
	}
}
