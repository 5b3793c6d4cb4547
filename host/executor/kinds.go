package executor

import (
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// The kinds of op, each defined once: what it holds, what it checks (step
// 1), and what it does in step 2 (reversible kinds, under the journal) or
// step 3 (the others). check.go and apply.go only walk the steps. A new
// verb either maps onto a kind here (op.go's verbOps) or adds one.

// The step each kind acts in, held by the compiler: reversible kinds in
// step 2, committed kinds in step 3; spliceOp in neither (its session's
// splice is planned and applied by span.go), unsupportedOp never gets
// past check.
var (
	_ reversible = (*pinOp)(nil)
	_ reversible = (*unpinOp)(nil)
	_ reversible = (*markOp)(nil)
	_ committed  = (*warmOp)(nil)
	_ committed  = (*pauseOp)(nil)
	_ committed  = (*renewOp)(nil)
	_ committed  = (*revokeOp)(nil)
	_ committed  = (*pruneOp)(nil)
	_ committed  = (*purgeOp)(nil)
	_ committed  = (*retainOp)(nil)
	_ committed  = (*resumeOp)(nil)
	_ op         = (*spliceOp)(nil)
	_ op         = (*unsupportedOp)(nil)
)

// unsupportedOp is refused with not_supported_yet.
type unsupportedOp struct {
	opBase
	why string
}

func (o *unsupportedOp) check(*turnCheck, *turnState) *errcode.Error {
	return errcode.New(errcode.NotSupportedYet, "%s: %s", o.verb, o.why)
}

func (o *unsupportedOp) describe() string { return "" }

// pinOp pins pages, named by blocks, tokens, or a session's span.
type pinOp struct {
	opBase
	pages
	span
	ttl  *directive.TTL
	ttlD time.Duration // resolved by check
}

func (o *pinOp) check(tc *turnCheck, st *turnState) *errcode.Error {
	if o.session != "" {
		snap, err := tc.session(&o.opBase, o.span, st)
		if err != nil {
			return err
		}
		o.tokens = snap.Session.Tokens[:o.end]
	}
	if err := tc.resolvePages(&o.opBase, &o.pages); err != nil {
		return err
	}
	o.ttlD = tc.e.cfg.PinTTL.Resolve(ttlOr0(o.ttl))
	return nil
}

func (o *pinOp) apply(ix *cache.Index, tenant string) *errcode.Error {
	if _, err := ix.Pin(o.target(tenant), o.ttlD); err != nil {
		return fromCache(err)
	}
	o.eff.Blocks, o.eff.TTL = len(o.seqs), directive.TTL(o.ttlD)
	return nil
}

// unpinOp unpins pages.
type unpinOp struct {
	opBase
	pages
}

func (o *unpinOp) check(tc *turnCheck, _ *turnState) *errcode.Error {
	return tc.resolvePages(&o.opBase, &o.pages)
}

func (o *unpinOp) apply(ix *cache.Index, tenant string) *errcode.Error {
	res, err := ix.Unpin(o.target(tenant))
	if err != nil {
		return fromCache(err)
	}
	o.eff.Blocks = len(o.seqs) - res.NotPinned
	o.eff.Skip(directive.SkipNotPinned, res.NotPinned)
	return nil
}

// markOp marks pages transient (Think transient=true).
type markOp struct {
	opBase
	pages
}

func (o *markOp) check(tc *turnCheck, _ *turnState) *errcode.Error {
	return tc.resolvePages(&o.opBase, &o.pages)
}

func (o *markOp) apply(ix *cache.Index, tenant string) *errcode.Error {
	res, err := ix.MarkTransient(o.target(tenant), true)
	if err != nil {
		return fromCache(err)
	}
	o.eff.Blocks = res.Pages
	return nil
}

// warmOp plans copies of pages to a hotter tier, for the mover.
type warmOp struct {
	opBase
	pages
	tierName string
	to       tier.Tier // parsed by check
}

func (o *warmOp) check(tc *turnCheck, _ *turnState) *errcode.Error {
	if err := tc.resolvePages(&o.opBase, &o.pages); err != nil {
		return err
	}
	t, err := tier.Parse(o.tierName)
	o.to = t
	switch {
	case err != nil:
		return errcode.Wrap(errcode.InvalidTier, err, "")
	case !tc.present(t):
		return errcode.New(errcode.InvalidTier, "tier %s is not configured on this host", t)
	case tc.att.Transitions == nil:
		return errcode.New(errcode.Unavailable, "Warm: no mover is attached to carry out copies")
	}
	return nil
}

func (o *warmOp) commit(c *commitStep) error {
	var res cache.FetchResult
	var err error
	c.trans, res, err = c.ix.PlanFetch(o.target(c.tenant), o.to, c.trans)
	o.eff.Blocks = res.Planned
	o.eff.Skip(directive.SkipAlready, res.Already)
	o.eff.Skip(directive.SkipTransient, res.Skipped)
	return err
}

// pauseOp puts pages under a new lease on the pause tier.
type pauseOp struct {
	opBase
	pages
	lease string
	ttl   *directive.TTL
	ttlD  time.Duration // resolved by check
}

func (o *pauseOp) check(tc *turnCheck, _ *turnState) *errcode.Error {
	if err := tc.resolvePages(&o.opBase, &o.pages); err != nil {
		return err
	}
	cfg := &tc.e.cfg
	v := tc.lease(o.lease)
	switch {
	case v.exists:
		return errcode.New(errcode.LeaseExists, "lease %q", o.lease)
	case !tc.present(cfg.PauseTier):
		return errcode.New(errcode.Unavailable, "pause tier %s is not configured on this host", cfg.PauseTier)
	}
	// Refused here, whole and at once, when the pause tier cannot take the
	// pages: an "ok" whose copies then fail in the background left a
	// worker's device full of leased pages.
	need, err := tc.ix.PauseRoom(o.target(tc.tenant), cfg.PauseTier, tc.pauseClaim)
	if err != nil {
		return fromCache(err)
	}
	tc.pauseClaim += need
	if o.ttl == nil {
		o.ttlD = cfg.LeaseTTL.Max // an indefinite lease, within the operator's clamp
	} else {
		o.ttlD = cfg.LeaseTTL.Resolve(ttlOr0(o.ttl))
	}
	v.exists, v.tenant = true, tc.tenant
	return nil
}

func (o *pauseOp) commit(c *commitStep) error {
	li, res, err := c.ix.Pause(o.target(c.tenant), o.lease, c.e.cfg.PauseTier, o.ttlD)
	o.eff.Blocks, o.eff.LeaseID, o.eff.TTL = res.Pages, li.ID, directive.TTL(o.ttlD)
	return err
}

func (o *pauseOp) describe() string { return describePages(&o.pages, o.lease) }

// renewOp gives a lease a new TTL.
type renewOp struct {
	opBase
	lease string
	ttl   directive.TTL
	ttlD  time.Duration // resolved by check
}

func (o *renewOp) check(tc *turnCheck, _ *turnState) *errcode.Error {
	if _, err := tc.ownLease(o.lease); err != nil {
		return err
	}
	o.ttlD = tc.e.cfg.LeaseTTL.Resolve(o.ttl.Duration())
	return nil
}

func (o *renewOp) commit(c *commitStep) error {
	li, err := c.ix.RenewLease(o.lease, o.ttlD)
	o.eff.Blocks, o.eff.LeaseID, o.eff.TTL = li.Pages, li.ID, directive.TTL(o.ttlD)
	return err
}

func (o *renewOp) describe() string { return "lease " + o.lease }

// revokeOp ends a lease and purges its pages.
type revokeOp struct {
	opBase
	lease string
}

func (o *revokeOp) check(tc *turnCheck, _ *turnState) *errcode.Error {
	v, err := tc.ownLease(o.lease)
	if err != nil {
		return err
	}
	v.exists = false
	return nil
}

func (o *revokeOp) commit(c *commitStep) error {
	res, err := c.ix.RevokeLease(o.lease)
	o.eff.Blocks, o.eff.LeaseID = res.Removed, o.lease
	skipPurge(&o.eff, res, directive.SkipShared)
	c.freed = append(c.freed, res.Freed...)
	return err
}

func (o *revokeOp) describe() string { return "lease " + o.lease }

// pruneOp removes the descendants of pages.
type pruneOp struct {
	opBase
	pages
}

func (o *pruneOp) check(tc *turnCheck, _ *turnState) *errcode.Error {
	return tc.resolvePages(&o.opBase, &o.pages)
}

func (o *pruneOp) commit(c *commitStep) error {
	res, err := c.ix.PruneDescendants(o.target(c.tenant))
	o.eff.Blocks = res.Removed
	skipPurge(&o.eff, res, directive.SkipAncestor)
	c.freed = append(c.freed, res.Freed...)
	return err
}

// purgeOp purges transient pages (Think transient=false). Interior ones,
// with children outside the purge, are purged by splices (span.go).
type purgeOp struct {
	opBase
	pages
	spliced bool // a purge done (in part) by splices
}

func (o *purgeOp) check(tc *turnCheck, st *turnState) *errcode.Error {
	if err := tc.resolvePages(&o.opBase, &o.pages); err != nil {
		return err
	}
	if interior := interiorPurge(tc.ix, tc.tenant, o.seqs); len(interior) > 0 {
		return tc.checkThinkSplice(o, interior, st)
	}
	return nil
}

func (o *purgeOp) commit(c *commitStep) error {
	res, err := c.ix.PurgeTransientLeaves(o.target(c.tenant))
	o.eff.Blocks += res.Removed
	skipPurge(&o.eff, res, directive.SkipAncestor)
	o.eff.Skip(directive.SkipInterior, res.Interior)
	o.eff.Skip(directive.SkipNotTransient, res.NotTransient)
	c.freed = append(c.freed, res.Freed...)
	return err
}

// spliceOp is a Splice or an Evict: it joins its session's splice, which
// is planned after the reversible step and applied first in the commit
// step (span.go).
type spliceOp struct {
	opBase
	span
	repl     []uint32
	textRepl bool
	dirMode  directive.Mode
	// recompute is the directive's own (nil: the tenant's configured one).
	recompute *splice.Recompute
}

// recomputeOf is a directive's recompute in the splicer's terms.
func recomputeOf(r *directive.Recompute) *splice.Recompute {
	if r == nil {
		return nil
	}
	return &splice.Recompute{First: int(min(r.First, 1<<30)), Share: r.Share, MaxKL: r.MaxKL}
}

func (o *spliceOp) check(tc *turnCheck, st *turnState) *errcode.Error {
	snap, err := tc.session(&o.opBase, o.span, st)
	if err != nil {
		return err
	}
	if o.textRepl {
		return errcode.New(errcode.NotSupportedYet, "%s: text replacements need the engine's tokenizer; send the replacement as token ids", o.verb)
	}
	g := st.group(snap)
	g.edits = append(g.edits, splice.Edit{Start: int(o.start), End: int(o.end), Replacement: o.repl, Mode: tc.e.modeOf(o.dirMode),
		Recompute: o.recompute})
	g.ops = append(g.ops, o)
	return nil
}

func (o *spliceOp) describe() string { return "" }

// retainOp raises the eviction priority of a session's span.
type retainOp struct {
	opBase
	pages // resolved from the span by check
	span
	priority int
	ttl      *directive.TTL
	ttlD     time.Duration // resolved by check
}

func (o *retainOp) check(tc *turnCheck, st *turnState) *errcode.Error {
	snap, err := tc.session(&o.opBase, o.span, st)
	if err != nil {
		return err
	}
	P := tc.ix.PageSize()
	seqs, _, _ := resolveTokens(tc.ix, tc.tenant, tc.e.cfg.Salt(tc.tenant), snap.Session.Tokens[:o.end])
	if first := int(o.start) / P; first < len(seqs) {
		o.seqs = seqs[first:]
	}
	if len(o.seqs) == 0 {
		return errcode.New(errcode.UnknownBlock, "Retain: no cached page of session %q covers [%d, %d)", o.session, o.start, o.end)
	}
	o.ttlD = tc.e.cfg.PinTTL.Resolve(ttlOr0(o.ttl))
	return nil
}

func (o *retainOp) commit(c *commitStep) error {
	res, err := c.ix.Retain(o.target(c.tenant), o.priority, o.ttlD)
	o.eff.Blocks, o.eff.TTL = res.Pages, directive.TTL(o.ttlD)
	return err
}

// resumeOp loads a lease's paused pages back to the device, then ends the
// lease: they become ordinary pages (not purged, as RevokeLease would).
type resumeOp struct {
	opBase
	lease string
}

func (o *resumeOp) check(tc *turnCheck, _ *turnState) *errcode.Error {
	v, err := tc.ownLease(o.lease)
	if err != nil {
		return err
	}
	if tc.att.Transitions == nil {
		return errcode.New(errcode.Unavailable, "Resume: no mover is attached to load the lease back")
	}
	v.exists = false
	return nil
}

func (o *resumeOp) commit(c *commitStep) error {
	li, _ := c.ix.Lease(o.lease)
	var res cache.FetchResult
	var err error
	c.trans, res, err = c.ix.PlanFetch(cache.TargetHashes(c.tenant, li.Seqs...), tier.Device, c.trans)
	o.eff.Blocks, o.eff.LeaseID = res.Planned, o.lease
	o.eff.Skip(directive.SkipAlready, res.Already)
	o.eff.Skip(directive.SkipTransient, res.Skipped)
	if _, lerr := c.ix.EndLease(o.lease); err == nil {
		err = lerr
	}
	return err
}

func (o *resumeOp) describe() string { return "lease " + o.lease }

func ttlOr0(t *directive.TTL) time.Duration {
	if t == nil {
		return 0
	}
	return t.Duration()
}
