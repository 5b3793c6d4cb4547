package executor

import (
	"slices"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Span verbs (Splice, Evict, span Pin, Retain) address a session's cached
// sequence by position, and a Think purge of an interior page is a splice
// of every session whose path runs through it. Sessions
// are read from the splicer's Sessions before the index lock is taken
// (the engine service locks its sessions, then the index: never the
// reverse), planned with their fresh pages reserved after the reversible
// verbs (so a turn's pins are seen and a refusal still rolls them back),
// and applied first in the commit step. Fills run after the lock is
// released (splice.Splicer.Finish).

// turnState carries what a turn's span verbs read before the lock, and the
// splice jobs planned under it.
type turnState struct {
	snaps   map[string]splice.Snapshot
	snapErr map[string]error
	// through maps a Think purge's page to the sessions whose path holds it.
	through map[uint64][]splice.Snapshot
	jobs    []*splice.Job
	// groups are the splices to plan: one per session, in turn order.
	groups []*spliceGroup
}

// spliceGroup is one session's edits in a turn (Splice, Evict, or a Think
// purge), planned as one multi-edit splice.
type spliceGroup struct {
	snap  splice.Snapshot
	edits []splice.Edit
	ops   []op
	job   *splice.Job
}

// prefetch reads, without the index lock, the sessions the turn's span
// verbs name and the sessions through the pages of its Think purges.
func (t *turn) prefetch() {
	// The maps are made on first use: most turns touch no session.
	st, sp := &t.st, t.att.Splicer
	if sp == nil {
		return
	}
	for _, o := range t.ops {
		if s, ok := o.(spanned); ok && s.spanOf().session != "" {
			st.snapshot(sp, s.spanOf().session)
		} else if pu, ok := o.(*purgeOp); ok {
			st.sessionsThrough(sp, t.tenant, pu.hashes)
		}
	}
}

// snapshot reads session id once per turn.
func (st *turnState) snapshot(sp *splice.Splicer, id string) {
	if _, done := st.snaps[id]; done || st.snapErr[id] != nil {
		return
	}
	if st.snaps == nil {
		st.snaps, st.snapErr = map[string]splice.Snapshot{}, map[string]error{}
	}
	if s, err := sp.Snapshot(id); err != nil {
		st.snapErr[id] = err
	} else {
		st.snaps[id] = s
	}
}

// sessionsThrough reads the sessions whose path holds each of hashes.
func (st *turnState) sessionsThrough(sp *splice.Splicer, tenant string, hashes []uint64) {
	for _, h := range hashes {
		if st.through == nil {
			st.through = map[uint64][]splice.Snapshot{}
		}
		if _, done := st.through[h]; done {
			continue
		}
		var snaps []splice.Snapshot
		for _, s := range sp.Sessions().Through(tenant, h) {
			snaps = append(snaps, splice.Snapshot{Session: s, Leaves: sp.Sessions().Leaves(tenant, s.ID)})
		}
		st.through[h] = snaps
	}
}

// session resolves a span op's session (check step, lock held): a splicer
// must be attached, the session read, the tenant's, and long enough for
// the span.
func (tc *turnCheck) session(b *opBase, sp span, st *turnState) (splice.Snapshot, *errcode.Error) {
	if tc.att.Splicer == nil {
		return splice.Snapshot{}, errcode.New(errcode.Unavailable, "%s: no device pool is attached to splice or resolve sessions", b.verb)
	}
	snap, ok := st.snaps[sp.session]
	if !ok {
		return splice.Snapshot{}, fromSplice(st.snapErr[sp.session])
	}
	sess := snap.Session
	if sess.Tenant != tc.tenant {
		return splice.Snapshot{}, errcode.New(errcode.TenantMismatch, "session %q belongs to another tenant", sp.session)
	}
	if n := int64(len(sess.Tokens)); sp.end > n {
		return splice.Snapshot{}, errcode.New(errcode.InvalidSpan, "%s: span [%d, %d) past the end of session %q's %d-token sequence", b.verb, sp.start, sp.end, sp.session, n)
	}
	return snap, nil
}

// group returns the session's splice group, creating it in turn order.
func (st *turnState) group(snap splice.Snapshot) *spliceGroup {
	for _, g := range st.groups {
		if g.snap.Session.ID == snap.Session.ID {
			return g
		}
	}
	g := &spliceGroup{snap: snap}
	st.groups = append(st.groups, g)
	return g
}

// checkThinkSplice turns the interior transient pages of a Think purge
// into splice groups: for each session through them, each run of
// consecutive purged pages on its path is an edit with an empty
// replacement, in the configured mode.
func (tc *turnCheck) checkThinkSplice(o *purgeOp, interior []uint64, st *turnState) *errcode.Error {
	e, tenant := tc.e, tc.tenant
	if tc.att.Splicer == nil {
		return errcode.New(errcode.NotSupportedYet, "Think: block %d is an interior transient block; purging it is a splice, and no device pool is attached to splice", interior[0])
	}
	P := tc.ix.PageSize()
	purge := map[uint64]bool{} // the purge's transient pages: what the splices remove
	for _, s := range o.seqs {
		if p, ok := tc.ix.Lookup(tenant, s); ok && p.Transient {
			purge[s] = true
		}
	}
	o.spliced = true
	for _, seq := range interior {
		snaps := st.through[seq]
		if len(snaps) == 0 {
			return errcode.New(errcode.UnknownSession, "Think: interior transient block %d is on no known session's cached sequence, so its descendants cannot be re-hashed; send Evict on the session's span instead", seq)
		}
		for _, snap := range snaps {
			g := st.group(snap)
			if slices.Contains(g.ops, op(o)) {
				continue // this session's runs are already planned
			}
			sess := snap.Session
			h := hashesOf(sess.Tokens, P, e.cfg.Salt(tenant))
			for k := 0; k < len(h); k++ {
				if !purge[h[k]] {
					continue
				}
				start := k
				for k < len(h) && purge[h[k]] {
					k++
				}
				g.edits = append(g.edits, splice.Edit{Start: start * P, End: k * P, Mode: e.modeOf("")})
			}
			g.ops = append(g.ops, o)
		}
	}
	return nil
}

// planSplices plans every group and reserves its pages (reversible step,
// journal open). On a failure the jobs planned so far are cancelled and
// the failing group's first op carries the error.
func (t *turn) planSplices(ix *cache.Index) (failed op, err *errcode.Error) {
	st := &t.st
	for _, g := range st.groups {
		job, perr := t.att.Splicer.Plan(ix, g.snap, g.edits)
		if perr != nil {
			for _, j := range st.jobs {
				j.Cancel()
			}
			st.jobs = nil
			return g.ops[0], fromSplice(perr)
		}
		g.job = job
		st.jobs = append(st.jobs, job)
	}
	return nil, nil
}

// applySplices applies the planned jobs (commit step, first). The check
// made them current, so an error is a bug or a kernel failure: it is the
// turn's error.
func applySplices(ix *cache.Index, st *turnState) *errcode.Error {
	var first *errcode.Error
	for _, g := range st.groups {
		err := g.job.Apply(ix)
		if err != nil && !g.job.Applied() {
			g.job.Cancel()
		}
		res := g.job.Result()
		for k, o := range g.ops {
			eff := &o.base().eff
			eff.Blocks += res.NewPages
			eff.Skip(directive.SkipShared, res.Shared)
			eff.Tokens += int64(res.MovedRows + res.InPlace*ix.PageSize())
			if rc := res.Recompute; k == 0 && rc.Region > 0 {
				// One splice per session: its first directive reports it.
				eff.RecomputedTokens, eff.RecomputeRegion = int64(rc.Planned), int64(rc.Region)
			}
		}
		if err != nil && first == nil {
			first = errcode.Wrap(errcode.Internal, err, "splice").At(g.ops[0].base().index)
		}
	}
	return first
}

func (e *Executor) modeOf(m directive.Mode) splice.Mode {
	if m == directive.ModeDefault {
		m = e.cfg.DefaultMode
	}
	if m == directive.ModeForget {
		return splice.Forget
	}
	return splice.Amortize
}

func hashesOf(tokens []uint32, pageSize int, salt blockid.Salt) []uint64 {
	return blockid.Compute(tokens, pageSize, salt).Sequence
}

// fromSplice wraps a splice or index error as a registry error.
func fromSplice(err error) *errcode.Error {
	if err == nil {
		return errcode.New(errcode.Internal, "span verb failed without a reason")
	}
	return fromCache(err)
}
