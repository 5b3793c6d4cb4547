package cache

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

// TestScripts runs testdata/*.txt. The commands (tokens are specs like
// 0+12, twelve tokens from 0, or 0+4,100+8; a command on tokens acts on the
// deepest full page of them, or on page=K, the K-th):
//
//	new [write=none|back|through] [device=N host=N disk=N remote=N]
//	    [high=F low=F] [device-high=F device-low=F ...] [pin=F]
//	                          a fresh index (testConfig's by default)
//	commit [tenant=a] [tick=D]  commit each input line's tokens to fresh
//	                          device slots, the clock advancing D between;
//	                          prints the pages stored and already present
//	match [tenant=a]          match the input's tokens (a hit: last use now)
//	pin|unpin [ttl=D]         pin (or unpin) the input's page and its path
//	lock|unlock               a running request's lock on the page's path
//	retain prio=N ttl=D       eviction priority for the page
//	pause lease=ID tier=T ttl=D | renew lease=ID ttl=D | revoke lease=ID
//	splice [forget] [nofills] [sink=N] [noapply] [shared=TOKENS]
//	                          plan (and apply, fills done) a splice of the
//	                          session whose tokens are the first input
//	                          line; each further line is an edit
//	                          "START-END [REPLACEMENT TOKENS]"
//	evict [rounds=N]          plan and complete transitions until none is
//	                          planned, printing each
//	plan | complete | fail    plan transitions (printed); report those
//	                          planned done, or failed
//	tick D | sweep            advance the clock; sweep lapsed pins, leases
//	state                     the tiers, every page as a tree, the leases
//
// Pages are named by their tokens; the tree shows where each is resident
// and what holds it.
func TestScripts(t *testing.T) {
	runScripts(t, "testdata/*.txt", newScriptEnv, (*scriptEnv).run)
}

type scriptEnv struct {
	t       *testing.T
	ix      *Index
	clock   *ManualClock
	loc     uint64
	planned []Transition // by plan, for complete
	// tokens names every page the script hashed, by sequence hash.
	tokens map[uint64][]uint32
}

func newScriptEnv(t *testing.T) *scriptEnv {
	s := &scriptEnv{t: t}
	if out := s.reset(&scriptCase{args: map[string][]string{}}); out != "" {
		t.Fatal(out)
	}
	return s
}

func (s *scriptEnv) run(c *scriptCase) string {
	cmds := map[string]func(*scriptCase) string{
		"new": s.reset, "commit": s.commit, "match": s.match, "pin": s.pin, "unpin": s.unpin,
		"lock": s.lock, "unlock": s.lock, "retain": s.retain, "pause": s.pause, "renew": s.renew, "revoke": s.revoke,
		"splice": s.splice, "evict": s.evict, "plan": s.plan, "complete": s.complete, "fail": s.complete, "tick": s.tick, "sweep": s.sweep,
		"state": s.state,
	}
	f := cmds[c.cmd]
	if f == nil {
		s.t.Fatalf("%s: unknown command %q", c.pos, c.cmd)
	}
	out := f(c)
	if err := s.ix.Check(); err != nil {
		s.t.Fatalf("%s: invariants after %s: %v", c.pos, c.cmd, err)
	}
	return out
}

func (s *scriptEnv) reset(c *scriptCase) string {
	s.clock = NewManualClock(time.Second)
	cfg := testConfig(s.clock)
	for _, t := range tier.All {
		if v := c.arg(t.String(), ""); v != "" {
			cfg.Tiers[t].Capacity = s.int(c, v)
			if cfg.Tiers[t].Capacity > 0 && cfg.Tiers[t].High == 0 {
				cfg.Tiers[t] = TierConfig{Capacity: cfg.Tiers[t].Capacity, High: 0.9, Low: 0.5, PinFraction: 0.5}
			}
		}
		tc := &cfg.Tiers[t]
		tc.High = s.float(c, c.arg(t.String()+"-high", c.arg("high", "")), tc.High)
		tc.Low = s.float(c, c.arg(t.String()+"-low", c.arg("low", "")), tc.Low)
		tc.PinFraction = s.float(c, c.arg("pin", ""), tc.PinFraction)
	}
	if w := c.arg("write", ""); w != "" {
		p, err := ParseWritePolicy(w)
		if err != nil {
			return "error: " + err.Error()
		}
		cfg.DeviceWrite = p
	}
	ix, err := New(cfg)
	if err != nil {
		return "error: " + err.Error()
	}
	s.ix, s.loc, s.planned, s.tokens = ix, 0, nil, map[uint64][]uint32{}
	return ""
}

// hashes hashes toks for tenant and names its pages.
func (s *scriptEnv) hashes(tenant string, toks []uint32) blockid.Hashes {
	h := blockid.Compute(toks, testPage, blockid.Salt{Namespace: tenant})
	for i, q := range h.Sequence {
		s.tokens[q] = toks[i*testPage : (i+1)*testPage]
	}
	return h
}

// page is the page the case acts on: the deepest full page of its first
// input line's tokens, or page=K.
func (s *scriptEnv) page(c *scriptCase) (tenant string, seq uint64) {
	tenant = c.arg("tenant", "a")
	if len(c.input) == 0 {
		s.t.Fatalf("%s: %s needs tokens on an input line", c.pos, c.cmd)
	}
	h := s.hashes(tenant, s.toks(c, c.input[0]))
	k := len(h.Sequence) - 1
	if v := c.arg("page", ""); v != "" {
		k = s.int(c, v)
	}
	if k < 0 || k >= len(h.Sequence) {
		s.t.Fatalf("%s: no page %d in %s", c.pos, k, c.input[0])
	}
	return tenant, h.Sequence[k]
}

func (s *scriptEnv) commit(c *scriptCase) string {
	tenant := c.arg("tenant", "a")
	var out []string
	var stored, present int
	for i, line := range c.input {
		if i > 0 {
			s.clock.Advance(s.dur(c, c.arg("tick", "0s")))
		}
		toks := s.toks(c, line)
		var m MatchResult
		s.ix.MatchHashes(tenant, s.hashes(tenant, toks), &m)
		locs := make([]uint64, len(m.Hashes.Sequence))
		for i := range locs {
			if i < len(m.Pages) && m.Pages[i].Tiers.Has(tier.Device) {
				locs[i] = m.Pages[i].Loc[tier.Device]
			} else {
				s.loc++
				locs[i] = s.loc
			}
		}
		var res CommitResult
		if err := s.ix.Commit(tenant, m.Hashes, locs, &res); err != nil {
			out = append(out, "error: "+err.Error())
		}
		stored, present = stored+res.Stored, present+res.Present
	}
	return strings.Join(append(out, fmt.Sprintf("stored %d, present %d", stored, present)), "\n")
}

func (s *scriptEnv) match(c *scriptCase) string {
	tenant := c.arg("tenant", "a")
	var m MatchResult
	s.ix.MatchHashes(tenant, s.hashes(tenant, s.toks(c, c.input[0])), &m)
	parts := make([]string, len(m.Pages))
	for i, p := range m.Pages {
		parts[i] = s.name(p.Seq) + " " + tierNames(p.Tiers)
	}
	return fmt.Sprintf("matched %d: %s", len(m.Pages), strings.Join(parts, ", "))
}

func (s *scriptEnv) pin(c *scriptCase) string {
	tenant, seq := s.page(c)
	res, err := s.ix.Pin(TargetHashes(tenant, seq), s.dur(c, c.arg("ttl", "5m")))
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("pinned %s, %d newly", pages(res.Pages), res.NewlyPinned)
}

func (s *scriptEnv) unpin(c *scriptCase) string {
	tenant, seq := s.page(c)
	res, err := s.ix.Unpin(TargetHashes(tenant, seq))
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("unpinned %s, %d cleared, %d not pinned", pages(res.Pages), res.Cleared, res.NotPinned)
}

func (s *scriptEnv) lock(c *scriptCase) string {
	tenant, seq := s.page(c)
	f := s.ix.Lock
	if c.cmd == "unlock" {
		f = s.ix.Unlock
	}
	if _, err := f(tenant, seq); err != nil {
		return "error: " + err.Error()
	}
	return ""
}

func (s *scriptEnv) retain(c *scriptCase) string {
	tenant, seq := s.page(c)
	res, err := s.ix.Retain(TargetHashes(tenant, seq), s.int(c, c.arg("prio", "0")), s.dur(c, c.arg("ttl", "1h")))
	if err != nil {
		return "error: " + err.Error()
	}
	return "retained " + pages(res.Pages)
}

func (s *scriptEnv) pause(c *scriptCase) string {
	tenant, seq := s.page(c)
	t, err := tier.Parse(c.arg("tier", "disk"))
	if err != nil {
		s.t.Fatalf("%s: %v", c.pos, err)
	}
	li, _, err := s.ix.Pause(TargetHashes(tenant, seq), c.arg("lease", ""), t, s.dur(c, c.arg("ttl", "1m")))
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("lease %s: %s on %s", li.ID, pages(li.Pages), li.Tier)
}

func (s *scriptEnv) renew(c *scriptCase) string {
	li, err := s.ix.RenewLease(c.arg("lease", ""), s.dur(c, c.arg("ttl", "1m")))
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("lease %s expires in %v", li.ID, li.Expiry-s.clock.Now())
}

func (s *scriptEnv) revoke(c *scriptCase) string {
	res, err := s.ix.RevokeLease(c.arg("lease", ""))
	if err != nil {
		return "error: " + err.Error()
	}
	return purged(res)
}

func purged(r PurgeResult) string {
	return fmt.Sprintf("removed %d, kept %d (locked %d, pinned %d, leased %d)", r.Removed, r.Kept, r.Locked, r.Pinned, r.Leased)
}

func (s *scriptEnv) splice(c *scriptCase) string {
	tenant := c.arg("tenant", "a")
	toks := s.toks(c, c.input[0])
	s.hashes(tenant, toks)
	req := SpliceRequest{Tenant: tenant, Tokens: toks, Salt: blockid.Salt{Namespace: tenant},
		SinkTokens: s.int(c, c.arg("sink", "0")), NoFills: c.has("nofills")}
	for _, v := range c.args["shared"] {
		h := s.hashes(tenant, s.toks(c, v))
		req.SharedLeaves = append(req.SharedLeaves, h.Sequence[len(h.Sequence)-1])
	}
	for _, line := range c.input[1:] {
		span, repl, _ := strings.Cut(line, " ")
		a, b, ok := strings.Cut(span, "-")
		if !ok {
			s.t.Fatalf("%s: edit %q is not START-END [TOKENS]", c.pos, line)
		}
		e := SpliceEdit{Start: s.int(c, a), End: s.int(c, b), Forget: c.has("forget")}
		if repl != "" {
			e.Replacement = s.toks(c, repl)
		}
		req.Edits = append(req.Edits, e)
	}
	p, err := s.ix.PlanSplice(req)
	if err != nil {
		return "error: " + err.Error()
	}
	s.hashes(tenant, p.Tokens[:len(p.Hashes.Sequence)*testPage])
	out := []string{s.describePlan(p)}
	if c.has("noapply") {
		return out[0]
	}
	fresh := make([]uint64, p.FreshPages())
	for i := range fresh {
		s.loc++
		fresh[i] = s.loc
	}
	if err := p.AssignSlots(fresh); err != nil {
		return "error: " + err.Error()
	}
	if err := s.ix.ValidateSplice(p); err != nil {
		return "error: " + err.Error()
	}
	commit, err := s.ix.ApplySplice(p)
	if err == nil && len(p.Fills) > 0 { // the engine filled the replacements
		var rest SpliceCommit
		rest, err = s.ix.CommitSpliceRest(p)
		commit.Freed = append(commit.Freed, rest.Freed...)
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.Join(append(out, fmt.Sprintf("applied: %d old pages freed", len(commit.Freed))), "\n")
}

// describePlan says what a splice plan keeps, writes and drops.
func (s *scriptEnv) describePlan(p *SplicePlan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "delta %+d: keep %d of %d pages, %d new (%d in place), cached %d tokens\n",
		p.Delta(), p.Keep, p.OldPages, len(p.Pages), len(p.Pages)-p.FreshPages(), p.CachedTokens)
	for i, pg := range p.Pages {
		how := "fresh"
		if pg.InPlace {
			how = "in place from " + s.name(pg.From)
			if pg.Delta != 0 {
				how += fmt.Sprintf(", rotated %+d", pg.Delta)
			}
		}
		if pg.Fill {
			how += ", filled"
		}
		fmt.Fprintf(&b, "  new %s: %s\n", s.name(p.Hashes.Sequence[p.Keep+i]), how)
	}
	fmt.Fprintf(&b, "rows moved %d, rotated %d\n", p.MovedRows, p.RotatedRows)
	for _, f := range p.Fills {
		fmt.Fprintf(&b, "fill %s at %d\n", rangeName(f.Tokens), f.Position)
	}
	var rel []string
	for _, q := range p.Release {
		rel = append(rel, s.name(q))
	}
	fmt.Fprintf(&b, "release [%s], shared %d", strings.Join(rel, " "), p.SharedPages)
	return b.String()
}

func (s *scriptEnv) plan(*scriptCase) string {
	ts := s.ix.Plan(s.clock.Now(), nil)
	s.planned = append(s.planned, ts...)
	return s.transitions(ts)
}

func (s *scriptEnv) complete(c *scriptCase) string {
	var out []string
	for _, tr := range s.planned {
		var err error
		if c.cmd == "fail" {
			err = s.ix.FailTransition(tr)
		} else {
			err = s.done(tr)
		}
		if err != nil {
			out = append(out, s.transition(tr)+": "+err.Error())
		}
	}
	s.planned = nil
	return strings.Join(out, "\n")
}

// done reports tr carried out, a copy to a fresh location.
func (s *scriptEnv) done(tr Transition) error {
	if tr.Kind == Copy {
		s.loc++
		return s.ix.CompleteCopy(tr, s.loc)
	}
	return s.ix.CompleteDrop(tr)
}

func (s *scriptEnv) evict(c *scriptCase) string {
	var out []string
	for round := s.int(c, c.arg("rounds", "10")); round > 0; round-- {
		ts := s.ix.Plan(s.clock.Now(), nil)
		if len(ts) == 0 {
			return strings.Join(out, "\n")
		}
		out = append(out, s.transitions(ts))
		for _, tr := range ts {
			if err := s.done(tr); err != nil {
				out = append(out, s.transition(tr)+": "+err.Error())
			}
		}
	}
	return strings.Join(append(out, "still planning"), "\n")
}

func (s *scriptEnv) transitions(ts []Transition) string {
	out := make([]string, len(ts))
	for i, tr := range ts {
		out[i] = s.transition(tr)
	}
	return strings.Join(out, "\n")
}

func (s *scriptEnv) transition(tr Transition) string {
	if tr.Kind == Copy {
		return fmt.Sprintf("copy %s %s->%s (%s)", s.name(tr.Seq), tr.From, tr.To, tr.Reason)
	}
	return fmt.Sprintf("drop %s from %s (%s)", s.name(tr.Seq), tr.From, tr.Reason)
}

func (s *scriptEnv) tick(c *scriptCase) string {
	if len(c.args) != 1 {
		s.t.Fatalf("%s: tick takes one duration", c.pos)
	}
	for d := range c.args {
		s.clock.Advance(s.dur(c, d))
	}
	return ""
}

func (s *scriptEnv) sweep(*scriptCase) string {
	r := s.ix.Sweep(s.clock.Now())
	return fmt.Sprintf("pins %d, leases %d %v", r.Pins, r.Leases, r.Expired)
}

// state prints each present tier's use, every page as a tree under its
// tenant (children in token order), and the leases.
func (s *scriptEnv) state(*scriptCase) string {
	var b strings.Builder
	st := s.ix.Stats()
	var tiers []string
	for _, ts := range st.Tiers {
		if ts.Capacity > 0 {
			tiers = append(tiers, fmt.Sprintf("%s %d/%d", ts.Tier, ts.Pages, ts.Capacity))
		}
	}
	b.WriteString(strings.Join(tiers, ", "))
	if len(s.ix.wtQueue) > 0 {
		queued := make([]string, len(s.ix.wtQueue))
		for i, n := range s.ix.wtQueue {
			queued[i] = s.name(n.seq)
		}
		b.WriteString("\nwrite-through queued: " + strings.Join(queued, ", "))
	}
	names := make([]string, 0, len(s.ix.tenants))
	for name := range s.ix.tenants {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var roots []uint64
		children := map[uint64][]uint64{}
		for q := range s.ix.tenants[name].bySeq {
			if p, _ := s.ix.Lookup(name, q); p.HasParent {
				children[p.Parent] = append(children[p.Parent], q)
			} else {
				roots = append(roots, q)
			}
		}
		fmt.Fprintf(&b, "\n%s:", name)
		s.tree(&b, name, children, roots, 1)
	}
	for _, l := range s.ix.Leases() {
		fmt.Fprintf(&b, "\nlease %s (%s): %s on %s, expires in %v", l.ID, l.Tenant, pages(l.Pages), l.Tier, l.Expiry-s.clock.Now())
		if l.Settled {
			b.WriteString(", settled")
		}
		if l.Degraded {
			b.WriteString(", degraded: " + l.Reason)
		}
	}
	return b.String()
}

func (s *scriptEnv) tree(b *strings.Builder, tenant string, children map[uint64][]uint64, pages []uint64, depth int) {
	sort.Slice(pages, func(i, j int) bool {
		return slices.Compare(s.tokens[pages[i]], s.tokens[pages[j]]) < 0
	})
	for _, q := range pages {
		p, _ := s.ix.Lookup(tenant, q)
		fmt.Fprintf(b, "\n%s%s %s", strings.Repeat("  ", depth), s.name(q), s.holds(p))
		s.tree(b, tenant, children, children[q], depth+1)
	}
}

// holds says where a page is resident and what holds it there.
func (s *scriptEnv) holds(p PageInfo) string {
	var out []string
	for _, t := range p.Tiers.Tiers() {
		out = append(out, fmt.Sprintf("%s@%d", t, p.Loc[t]))
	}
	now := s.clock.Now()
	if p.PinCount > 0 {
		out = append(out, fmt.Sprintf("pin=%d (%v)", p.PinCount, p.PinExpiry-now))
	}
	if p.Priority > 0 && p.RetainExpiry > now {
		out = append(out, fmt.Sprintf("prio=%d (%v)", p.Priority, p.RetainExpiry-now))
	}
	if p.Lease != "" {
		out = append(out, "lease="+p.Lease)
	}
	if p.LockRef > 0 {
		out = append(out, fmt.Sprintf("lock=%d", p.LockRef))
	}
	if p.Transient {
		out = append(out, "transient")
	}
	if p.InFlight > 0 {
		out = append(out, fmt.Sprintf("inflight=%d", p.InFlight))
	}
	return strings.Join(out, " ")
}

// name is a page's tokens, as ranges.
func (s *scriptEnv) name(seq uint64) string {
	if toks, ok := s.tokens[seq]; ok {
		return rangeName(toks)
	}
	return fmt.Sprintf("#%x", seq)
}

// rangeName writes tokens as runs: 0-3 for 0,1,2,3; 4-5,100-101.
func rangeName(toks []uint32) string {
	var parts []string
	for i := 0; i < len(toks); {
		j := i
		for j+1 < len(toks) && toks[j+1] == toks[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(int(toks[i])))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", toks[i], toks[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func pages(n int) string {
	if n == 1 {
		return "1 page"
	}
	return strconv.Itoa(n) + " pages"
}

func tierNames(ts TierSet) string {
	var out []string
	for _, t := range ts.Tiers() {
		out = append(out, t.String())
	}
	return strings.Join(out, "+")
}

// toks reads a token spec: START+COUNT runs joined by commas.
func (s *scriptEnv) toks(c *scriptCase, spec string) []uint32 {
	var out []uint32
	for _, run := range strings.Split(strings.TrimSpace(spec), ",") {
		a, n, ok := strings.Cut(run, "+")
		if !ok {
			s.t.Fatalf("%s: token run %q is not START+COUNT", c.pos, run)
		}
		out = append(out, tokens(s.int(c, a), s.int(c, n))...)
	}
	return out
}

func (s *scriptEnv) int(c *scriptCase, v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		s.t.Fatalf("%s: %q is not a number", c.pos, v)
	}
	return n
}

func (s *scriptEnv) float(c *scriptCase, v string, def float64) float64 {
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		s.t.Fatalf("%s: %q is not a number", c.pos, v)
	}
	return f
}

func (s *scriptEnv) dur(c *scriptCase, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		s.t.Fatalf("%s: %q is not a duration", c.pos, v)
	}
	return d
}
