package executor

import (
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A turn's directives and cache_control actions become ops of a few kinds
// (op.go, cachecontrol.go: Cache with pin true and a session Pin are both
// opPin). What each kind checks and does in each step of a turn is defined
// here, once; check.go and apply.go only walk the steps. A new verb either
// maps onto a kind here or adds one entry.
type kindDef struct {
	// blocks: check first resolves the op's blocks (or tokens) to cached
	// pages and refuses the op when none is cached.
	blocks bool
	// reversible kinds apply in step 2, under the index's journal; the
	// others commit in step 3.
	reversible bool
	// check is what the kind checks after its pages (nil: nothing more).
	check func(tc *turnCheck, o *op, st *turnState) *errcode.Error
	// apply is step 2 of a reversible kind.
	apply func(ix *cache.Index, o *op, tgt cache.Target) *errcode.Error
	// commit is step 3 of the other kinds (nil: nothing to commit here;
	// splices are planned and applied by span.go).
	commit func(c *commitStep, o *op, tgt cache.Target) error
}

// commitStep is what step 3's ops add to: the transitions for the mover
// and the slots to free.
type commitStep struct {
	e      *Executor
	ix     *cache.Index
	tenant string
	trans  []cache.Transition
	freed  []cache.Freed
}

var kinds = [...]kindDef{
	opUnsupported: {check: func(_ *turnCheck, o *op, _ *turnState) *errcode.Error { return o.unsupported() }},
	opPin: {blocks: true, reversible: true,
		check: func(tc *turnCheck, o *op, _ *turnState) *errcode.Error {
			o.ttlD = tc.e.cfg.PinTTL.Resolve(o.ttlOr0())
			return nil
		},
		apply: func(ix *cache.Index, o *op, tgt cache.Target) *errcode.Error {
			if _, err := ix.Pin(tgt, o.ttlD); err != nil {
				return fromCache(err)
			}
			o.eff.Blocks, o.eff.TTL = len(o.seqs), directive.TTL(o.ttlD)
			return nil
		}},
	opUnpin: {blocks: true, reversible: true,
		apply: func(ix *cache.Index, o *op, tgt cache.Target) *errcode.Error {
			res, err := ix.Unpin(tgt)
			if err != nil {
				return fromCache(err)
			}
			o.eff.Blocks = len(o.seqs) - res.NotPinned
			o.eff.Skip(directive.SkipNotPinned, res.NotPinned)
			return nil
		}},
	opMark: {blocks: true, reversible: true,
		apply: func(ix *cache.Index, o *op, tgt cache.Target) *errcode.Error {
			res, err := ix.MarkTransient(tgt, o.on)
			if err != nil {
				return fromCache(err)
			}
			o.eff.Blocks = res.Pages
			return nil
		}},
	opWarm:   {blocks: true, check: func(tc *turnCheck, o *op, _ *turnState) *errcode.Error { return tc.warm(o) }, commit: commitWarm},
	opPause:  {blocks: true, check: func(tc *turnCheck, o *op, _ *turnState) *errcode.Error { return tc.pause(o) }, commit: commitPause},
	opRenew:  {check: func(tc *turnCheck, o *op, _ *turnState) *errcode.Error { return tc.leaseChange(o) }, commit: commitRenew},
	opRevoke: {check: func(tc *turnCheck, o *op, _ *turnState) *errcode.Error { return tc.leaseChange(o) }, commit: commitRevoke},
	opPrune:  {blocks: true, commit: commitPrune},
	opPurge: {blocks: true,
		check: func(tc *turnCheck, o *op, st *turnState) *errcode.Error {
			if interior := interiorPurge(tc.ix, tc.tenant, o); len(interior) > 0 {
				return tc.checkThinkSplice(o, interior, st)
			}
			return nil
		},
		commit: commitPurge},
	opSplice: {}, // checkSpan, planSplices and applySplices (span.go)
	opRetain: {commit: commitRetain},
	opResume: {check: func(tc *turnCheck, o *op, _ *turnState) *errcode.Error { return tc.resume(o) }, commit: commitResume},
}

func commitWarm(c *commitStep, o *op, tgt cache.Target) error {
	var res cache.FetchResult
	var err error
	c.trans, res, err = c.ix.PlanFetch(tgt, o.to, c.trans)
	o.eff.Blocks = res.Planned
	o.eff.Skip(directive.SkipAlready, res.Already)
	o.eff.Skip(directive.SkipTransient, res.Skipped)
	return err
}

func commitPause(c *commitStep, o *op, tgt cache.Target) error {
	li, res, err := c.ix.Pause(tgt, o.lease, c.e.cfg.PauseTier, o.ttlD)
	o.eff.Blocks, o.eff.LeaseID, o.eff.TTL = res.Pages, li.ID, directive.TTL(o.ttlD)
	return err
}

func commitRenew(c *commitStep, o *op, _ cache.Target) error {
	li, err := c.ix.RenewLease(o.lease, o.ttlD)
	o.eff.Blocks, o.eff.LeaseID, o.eff.TTL = li.Pages, li.ID, directive.TTL(o.ttlD)
	return err
}

func commitRevoke(c *commitStep, o *op, _ cache.Target) error {
	res, err := c.ix.RevokeLease(o.lease)
	o.eff.Blocks, o.eff.LeaseID = res.Removed, o.lease
	skipPurge(&o.eff, res, directive.SkipShared)
	c.freed = append(c.freed, res.Freed...)
	return err
}

func commitPrune(c *commitStep, o *op, tgt cache.Target) error {
	res, err := c.ix.PruneDescendants(tgt)
	o.eff.Blocks = res.Removed
	skipPurge(&o.eff, res, directive.SkipAncestor)
	c.freed = append(c.freed, res.Freed...)
	return err
}

func commitPurge(c *commitStep, o *op, tgt cache.Target) error {
	res, err := c.ix.PurgeTransientLeaves(tgt)
	o.eff.Blocks += res.Removed
	skipPurge(&o.eff, res, directive.SkipAncestor)
	o.eff.Skip(directive.SkipInterior, res.Interior)
	o.eff.Skip(directive.SkipNotTransient, res.NotTransient)
	c.freed = append(c.freed, res.Freed...)
	return err
}

func commitRetain(c *commitStep, o *op, tgt cache.Target) error {
	res, err := c.ix.Retain(tgt, o.priority, o.ttlD)
	o.eff.Blocks, o.eff.TTL = res.Pages, directive.TTL(o.ttlD)
	return err
}

// commitResume loads the paused pages back to the device, then ends the
// lease: they become ordinary pages (not purged, as RevokeLease would).
func commitResume(c *commitStep, o *op, _ cache.Target) error {
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
