// Package idlepause is the built-in idle-pause policy: a session idle
// longer than idle_after is paused to the
// host's pause tier (disk, or the shared remote tier) under a lease, which
// frees its pages on the hotter tiers. The lease is renewed while the
// session is still expected back, and the session is resumed (its pages
// warmed) the moment it returns. A session that stays away lets its lease
// lapse; its pages then become ordinary evictable pages.
//
// Parameters (all optional; durations as "10m" or seconds):
//
//	idle_after          duration  pause sessions idle this long (default 10m)
//	lease_ttl           duration  lease length, and each renewal's (default 1h)
//	renew_before        duration  renew when the lease has this little left (default 5m)
//	expect_back_within  duration  renew only while the session has been idle less than this (default 4h)
//	min_blocks          int       do not pause sessions with fewer full pages (default 1)
//	max_pauses_per_tick int       spread a wave of idle sessions over ticks (default 64)
//
// Pages the session shares with another session that is not paused (a
// common system prompt) are left out of the lease, so pausing one session
// never cools another's prefix.
package idlepause

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// Name is the built-in's name.
const Name = "idle-pause"

// Params are the policy's parameters; see the package doc.
type Params struct {
	IdleAfter        *directive.TTL `json:"idle_after"`
	LeaseTTL         *directive.TTL `json:"lease_ttl"`
	RenewBefore      *directive.TTL `json:"renew_before"`
	ExpectBackWithin *directive.TTL `json:"expect_back_within"`
	MinBlocks        *int           `json:"min_blocks"`
	MaxPausesPerTick *int           `json:"max_pauses_per_tick"`
}

type session struct {
	id, tenant string
	lastSeen   time.Time
	blocks     []uint64
	paused     bool
	lease      string
	expiry     time.Time
	pauses     int
}

// Policy is the idle-pause policy.
type Policy struct {
	idleAfter, leaseTTL, renewBefore, expectBack time.Duration
	minBlocks, maxPauses                         int
	sessions                                     map[string]*session
}

// New returns an unconfigured policy.
func New() *Policy { return &Policy{} }

func (*Policy) Info() policy.Info {
	return policy.Info{Name: Name, Version: "1.0.0", Subscriptions: []policy.Kind{
		policy.KindRequestStarted, policy.KindRequestFinished, policy.KindTick}}
}

// Configure validates and installs params.
func (p *Policy) Configure(raw json.RawMessage) error {
	var ps Params
	if err := policy.DecodeParams(raw, &ps); err != nil {
		return err
	}
	dur := func(d *directive.TTL, def time.Duration) time.Duration {
		if d == nil || *d == 0 {
			return def
		}
		return d.Duration()
	}
	p.idleAfter = dur(ps.IdleAfter, 10*time.Minute)
	p.leaseTTL = dur(ps.LeaseTTL, time.Hour)
	p.renewBefore = dur(ps.RenewBefore, 5*time.Minute)
	p.expectBack = dur(ps.ExpectBackWithin, 4*time.Hour)
	p.minBlocks, p.maxPauses = 1, 64
	if ps.MinBlocks != nil {
		p.minBlocks = *ps.MinBlocks
	}
	if ps.MaxPausesPerTick != nil {
		p.maxPauses = *ps.MaxPausesPerTick
	}
	switch {
	case p.renewBefore >= p.leaseTTL:
		return fmt.Errorf("renew_before %v must be shorter than lease_ttl %v", p.renewBefore, p.leaseTTL)
	case p.minBlocks < 1:
		return fmt.Errorf("min_blocks %d: want >= 1", p.minBlocks)
	case p.maxPauses < 1 || p.maxPauses > directive.DefaultMaxDirectives:
		return fmt.Errorf("max_pauses_per_tick %d: want 1..%d", p.maxPauses, directive.DefaultMaxDirectives)
	}
	p.sessions = map[string]*session{}
	return nil
}

// Observe tracks activity on requests and pauses, renews and forgets on
// ticks.
func (p *Policy) Observe(_ context.Context, obs policy.Observation) ([]policy.Directive, error) {
	switch obs.Kind {
	case policy.KindRequestStarted, policy.KindRequestFinished:
		key := obs.Tenant + "\x00" + obs.Session
		s := p.sessions[key]
		if s == nil {
			s = &session{id: obs.Session, tenant: obs.Tenant}
			p.sessions[key] = s
		}
		s.lastSeen = obs.Time
		var out []policy.Directive
		if s.paused {
			// The session is back: bring its pages hot before the engine
			// matches them, and end the lease.
			out = append(out, directive.Resume{LeaseID: s.lease})
			s.paused = false
		}
		if obs.Kind == policy.KindRequestStarted && len(obs.Started.BlockHashes) > 0 {
			s.blocks = append(s.blocks[:0], obs.Started.BlockHashes...)
		}
		if obs.Kind == policy.KindRequestFinished && len(obs.Finished.BlockHashes) > 0 {
			s.blocks = append(s.blocks[:0], obs.Finished.BlockHashes...)
		}
		return out, nil
	case policy.KindTick:
		return p.tick(obs.Time), nil
	}
	return nil, nil
}

// tick returns the directives of one tick. A tick belongs to no session, so
// each directive is scoped to its session's tenant (policy.WithTenant); the
// host runs one turn per tenant.
func (p *Policy) tick(now time.Time) []policy.Directive {
	keys := make([]string, 0, len(p.sessions))
	for k := range p.sessions {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	// Pages held by sessions that stay hot are not paused with another.
	hot := map[uint64]int{}
	for _, k := range keys {
		s := p.sessions[k]
		if !s.paused && now.Sub(s.lastSeen) <= p.idleAfter {
			for _, h := range s.blocks {
				hot[h]++
			}
		}
	}
	var out []policy.Directive
	pauses := 0
	for _, k := range keys {
		s := p.sessions[k]
		idle := now.Sub(s.lastSeen)
		switch {
		case s.paused && !now.Before(s.expiry):
			delete(p.sessions, k) // the lease lapsed on the host too
		case s.paused && s.expiry.Sub(now) <= p.renewBefore:
			if idle < p.expectBack {
				out = append(out, policy.WithTenant(s.tenant, directive.RenewLease{LeaseID: s.lease, NewTTL: directive.TTL(p.leaseTTL)}))
				s.expiry = now.Add(p.leaseTTL)
			}
		case !s.paused && idle > p.idleAfter && pauses < p.maxPauses:
			if idle >= p.expectBack {
				delete(p.sessions, k) // gone for good; not worth a lease
				continue
			}
			var hs []directive.Hash
			for _, h := range s.blocks {
				if hot[h] == 0 {
					hs = append(hs, directive.Hash(h))
				}
			}
			if len(hs) < p.minBlocks {
				continue
			}
			s.pauses++
			s.lease = leaseID(s)
			s.paused = true
			s.expiry = now.Add(p.leaseTTL)
			pauses++
			out = append(out, policy.WithTenant(s.tenant, directive.Pause{BlockHashes: hs, TTL: directive.TTLOf(p.leaseTTL), LeaseID: s.lease}))
		}
		if len(out) >= directive.DefaultMaxDirectives {
			break
		}
	}
	return out
}

// leaseID names a session's n-th pause. Session ids can be long or odd, so
// the id carries a hash of tenant and session rather than the session.
func leaseID(s *session) string {
	h := fnv.New64a()
	h.Write([]byte(s.tenant))
	h.Write([]byte{0})
	h.Write([]byte(s.id))
	return fmt.Sprintf("idle-pause/%016x/%d", h.Sum64(), s.pauses)
}
