package agents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// target is where an arm's clients send: the chat completions URL and the
// model to ask for.
type target struct {
	url, model string
}

// result is one request as its client saw it.
type result struct {
	session, turn int
	// start is when it was sent, from the load's start.
	start time.Duration
	chat  scenario.ChatResult
	// errKind is empty for a request answered in full, else what failed
	// (errorKind); err says how.
	errKind, err string
}

// drive runs every session at once against t, each sending its turns in
// order with its tool time between them, and returns every request's
// result in the order they finished (times from started) and the time it
// took. finished, when set, is told each request's place in that order
// (1 for the first) as it finishes, from the session's goroutine.
func drive(ctx context.Context, t target, ss []session, started time.Time, finished func(n int)) ([]result, time.Duration) {
	var (
		mu  sync.Mutex
		out []result
		wg  sync.WaitGroup
	)
	for si, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if len(s.turns) == 0 {
				return
			}
			// Sessions arrive over the first tool time, not all in one instant.
			if !sleep(ctx, time.Duration(si)*s.tool[0]/time.Duration(len(ss))) {
				return
			}
			for ti, turn := range s.turns {
				r := result{session: si, turn: ti, start: time.Since(started)}
				var err error
				r.chat, err = scenario.StreamChat(ctx, t.url, t.model, s.id, turn.Messages)
				if err != nil {
					r.err, r.errKind = err.Error(), errorKind(err)
				}
				mu.Lock()
				out = append(out, r)
				n := len(out)
				mu.Unlock()
				if finished != nil {
					finished(n)
				}
				if !sleep(ctx, s.tool[ti]) {
					return
				}
			}
		}()
	}
	wg.Wait()
	return out, time.Since(started)
}

// errorKind names err for the report's errors by kind: the server's status
// and code, a stream cut short or carrying an error event, or a request
// that never got an answer.
func errorKind(err error) string {
	var he *scenario.HTTPError
	switch {
	case errors.As(err, &he):
		return strings.TrimSpace(fmt.Sprintf("%d %s", he.Status, he.Code))
	case errors.Is(err, io.ErrUnexpectedEOF), strings.HasPrefix(err.Error(), "stream error"), strings.HasPrefix(err.Error(), "chunk"):
		return "stream"
	}
	return "transport"
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
