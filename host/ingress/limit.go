package ingress

import (
	"time"

	"github.com/kvpilot/kvpilot/host/ratelimit"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

type limiter struct {
	*ratelimit.Limiter
	key string
}

// Admit takes a token from source's bucket at door and returns nil, or the
// rate_limited error naming the source, the limit and when to retry, and
// counts the refusal. A refusal is not audited: nothing was attempted, and
// a flood must not flood the audit log too. Doors call it once per call,
// before decoding more than they must.
func (g *Ingress) Admit(door Door, source string) *errcode.Error {
	l := g.limiters[door]
	if l == nil {
		return nil
	}
	ok, retry := l.Allow(source)
	if ok {
		return nil
	}
	g.rec.RateLimited(door)
	return errcode.New(errcode.RateLimited, "%s is past %s (%v); retry in %v",
		source, l.key, l.Limiter, max(retry, time.Millisecond).Round(time.Millisecond))
}

// Limited reports whether door has a rate limit, so a door can leave its
// limiting step out entirely when it has none.
func (g *Ingress) Limited(door Door) bool { return g.limiters[door] != nil }
