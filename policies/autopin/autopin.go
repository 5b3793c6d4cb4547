// Package autopin is the built-in auto-pin policy: a prefix that many
// requests share — a system prompt, a tool
// schema, a long document — is pinned so unrelated traffic cannot evict
// it, and unpinned once it cools.
//
// A prefix is a block path: RequestStarted carries the sequence hashes of
// the prompt's full pages, root first, and the hash at depth d names the
// prefix of d+1 pages. The policy counts, per block, the distinct sessions
// within a sliding window whose requests contained it. When a request
// finishes, the deepest block of its committed path (RequestFinished's
// block hashes) seen at least min_hits times is pinned with a TTL (pinning
// a block pins its ancestors). Pinning at finish, not at start, matters: a
// block two running requests share may not be committed yet, the host
// would refuse the pin as an unknown block, and the policy, which never
// hears the answer, would count the prefix as pinned. Pins stop where the
// pages this policy holds pinned would exceed max_pinned_blocks. On ticks, pinned prefixes whose window count fell
// below cool_below are unpinned. The TTL is the backstop: if the policy
// dies, its pins still expire. While a prefix stays hot the host refreshes
// its pin on every hit.
//
// Parameters (all optional; durations as "10m" or seconds):
//
//	min_hits           int       requests within the window before a prefix is pinned (default 3)
//	window             duration  the sliding window (default 10m)
//	ttl                duration  pin TTL (default 5m)
//	max_pinned_blocks  int       pages this policy may hold pinned, ancestors included (default 4096)
//	min_depth          int       only prefixes of at least this many pages (default 1)
//	cool_below         int       unpin when the window count drops below this (default 1)
//	per_session        bool      count distinct sessions, not requests (default true): a session
//	                             re-sending its own history each turn does not make it a shared prefix
package autopin

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// Name is the built-in's name.
const Name = "auto-pin"

// Params are the policy's parameters; see the package doc.
type Params struct {
	MinHits         *int           `json:"min_hits"`
	Window          *directive.TTL `json:"window"`
	TTL             *directive.TTL `json:"ttl"`
	MaxPinnedBlocks *int           `json:"max_pinned_blocks"`
	MinDepth        *int           `json:"min_depth"`
	CoolBelow       *int           `json:"cool_below"`
	PerSession      *bool          `json:"per_session"`
}

type key struct {
	tenant string
	hash   uint64
}

// hits keeps a block's most recent sightings, newest last, one per
// distinct source (session, or request when per_session is false); min_hits
// of them are enough to answer "at least min_hits within the window".
type hits struct {
	at  []time.Time
	src []string
}

func (h *hits) add(src string, now time.Time, limit int) {
	for i, s := range h.src {
		if s == src {
			h.src = append(h.src[:i], h.src[i+1:]...)
			h.at = append(h.at[:i], h.at[i+1:]...)
			break
		}
	}
	h.src = append(h.src, src)
	h.at = append(h.at, now)
	if len(h.at) > limit {
		h.at = h.at[len(h.at)-limit:]
		h.src = h.src[len(h.src)-limit:]
	}
}

type pin struct {
	path []key // root .. pinned block
}

// Policy is the auto-pin policy.
type Policy struct {
	minHits, maxPinned, minDepth, coolBelow int
	window, ttl                             time.Duration
	perSession                              bool

	hits    map[key]*hits
	pins    map[key]*pin
	covered map[key]int // pages under this policy's pins, with multiplicity
	// Skipped counts pins refused by the budget, for tests and logs.
	Skipped int
}

// New returns an unconfigured policy.
func New() *Policy { return &Policy{} }

func (*Policy) Info() policy.Info {
	return policy.Info{Name: Name, Version: "1.0.0", Subscriptions: []policy.Kind{policy.KindRequestStarted, policy.KindRequestFinished, policy.KindTick}}
}

// Configure validates and installs params.
func (p *Policy) Configure(raw json.RawMessage) error {
	var ps Params
	if err := policy.DecodeParams(raw, &ps); err != nil {
		return err
	}
	intOr := func(v *int, def int) int {
		if v == nil {
			return def
		}
		return *v
	}
	durOr := func(v *directive.TTL, def time.Duration) time.Duration {
		if v == nil || *v == 0 {
			return def
		}
		return v.Duration()
	}
	p.minHits = intOr(ps.MinHits, 3)
	p.maxPinned = intOr(ps.MaxPinnedBlocks, 4096)
	p.minDepth = intOr(ps.MinDepth, 1)
	p.coolBelow = intOr(ps.CoolBelow, 1)
	p.window = durOr(ps.Window, 10*time.Minute)
	p.ttl = durOr(ps.TTL, 5*time.Minute)
	p.perSession = ps.PerSession == nil || *ps.PerSession
	switch {
	case p.minHits < 1:
		return fmt.Errorf("min_hits %d: want >= 1", p.minHits)
	case p.maxPinned < 1:
		return fmt.Errorf("max_pinned_blocks %d: want >= 1", p.maxPinned)
	case p.minDepth < 1:
		return fmt.Errorf("min_depth %d: want >= 1", p.minDepth)
	case p.coolBelow < 1 || p.coolBelow > p.minHits:
		return fmt.Errorf("cool_below %d: want 1..min_hits (%d)", p.coolBelow, p.minHits)
	}
	p.hits = map[key]*hits{}
	p.pins = map[key]*pin{}
	p.covered = map[key]int{}
	return nil
}

// Observe counts on RequestStarted, pins on RequestFinished, and unpins
// cooled prefixes and drops stale counts on Tick.
func (p *Policy) Observe(_ context.Context, obs policy.Observation) ([]policy.Directive, error) {
	switch obs.Kind {
	case policy.KindRequestStarted:
		p.request(obs)
		return nil, nil
	case policy.KindRequestFinished:
		return p.finished(obs), nil
	case policy.KindTick:
		return p.tick(obs.Time), nil
	}
	return nil, nil
}

func (p *Policy) count(k key, now time.Time) int {
	h := p.hits[k]
	if h == nil {
		return 0
	}
	n := 0
	for _, t := range h.at {
		if now.Sub(t) <= p.window {
			n++
		}
	}
	return n
}

// request counts a request's prompt blocks.
func (p *Policy) request(obs policy.Observation) {
	src := obs.Session
	if !p.perSession || src == "" {
		src = obs.Started.RequestID + "\x00" + fmt.Sprint(obs.Seq)
	}
	for _, hv := range obs.Started.BlockHashes {
		k := key{obs.Tenant, hv}
		h := p.hits[k]
		if h == nil {
			h = &hits{}
			p.hits[k] = h
		}
		h.add(src, obs.Time, p.minHits)
	}
}

// finished pins the deepest hot block of a finished request's committed
// path, which the host therefore knows.
func (p *Policy) finished(obs policy.Observation) []policy.Directive {
	path := obs.Finished.BlockHashes
	now := obs.Time
	deepest := -1
	// Counts only fall along a path (a request containing a block
	// contains its ancestors), so the hot blocks form a prefix.
	for d, hv := range path {
		if p.count(key{obs.Tenant, hv}, now) < p.minHits {
			break
		}
		deepest = d
	}
	if deepest+1 < p.minDepth {
		return nil
	}
	leaf := key{obs.Tenant, path[deepest]}
	if p.pins[leaf] != nil {
		return nil
	}
	pp := &pin{path: make([]key, deepest+1)}
	fresh := 0
	for d := 0; d <= deepest; d++ {
		pp.path[d] = key{obs.Tenant, path[d]}
		if p.covered[pp.path[d]] == 0 {
			fresh++
		}
	}
	if p.pinnedPages()+fresh > p.maxPinned {
		p.Skipped++
		return nil
	}
	p.pins[leaf] = pp
	for _, k := range pp.path {
		p.covered[k]++
	}
	return []policy.Directive{directive.Cache{BlockHashes: []directive.Hash{directive.Hash(leaf.hash)}, Pin: true, TTL: directive.TTLOf(p.ttl)}}
}

func (p *Policy) pinnedPages() int { return len(p.covered) }

func (p *Policy) tick(now time.Time) []policy.Directive {
	leaves := make([]key, 0, len(p.pins))
	for k := range p.pins {
		leaves = append(leaves, k)
	}
	sort.Slice(leaves, func(a, b int) bool {
		if leaves[a].tenant != leaves[b].tenant {
			return leaves[a].tenant < leaves[b].tenant
		}
		return leaves[a].hash < leaves[b].hash
	})
	var out []policy.Directive
	for _, k := range leaves {
		if p.count(k, now) >= p.coolBelow {
			continue
		}
		for _, c := range p.pins[k].path {
			if p.covered[c]--; p.covered[c] == 0 {
				delete(p.covered, c)
			}
		}
		delete(p.pins, k)
		out = append(out, policy.WithTenant(k.tenant, directive.Cache{BlockHashes: []directive.Hash{directive.Hash(k.hash)}, Pin: false}))
		if len(out) == directive.DefaultMaxDirectives {
			break
		}
	}
	for k, h := range p.hits {
		if p.pins[k] == nil && (len(h.at) == 0 || now.Sub(h.at[len(h.at)-1]) > p.window) {
			delete(p.hits, k)
		}
	}
	return out
}
