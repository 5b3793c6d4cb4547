package executor

import (
	"errors"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// run checks and applies ops as one turn, then hands off transitions and
// freed slots and writes the audit records.
func (e *Executor) run(turnID, source, tenant string, ops []*op) directive.TurnReply {
	var (
		errs  []*errcode.Error
		trans []cache.Transition
		freed []cache.Freed
		turn  *errcode.Error
	)
	st := e.prefetch(tenant, ops) // sessions are read before the index lock
	e.cfg.Index.Do(func(ix *cache.Index) {
		errs = e.check(ix, tenant, ops, st)
		if errs == nil {
			errs = e.applyReversible(ix, tenant, ops, st)
		}
		if errs == nil {
			trans, freed, turn = e.applyCommit(ix, tenant, ops, st)
		}
	})
	if len(st.jobs) > 0 {
		// Sessions updated, released slots freed, fills started.
		e.att().Splicer.Finish(st.jobs...)
	}

	if len(trans) > 0 {
		e.att().Transitions(trans)
	}
	if len(freed) > 0 && e.att().Free != nil {
		e.att().Free(freed)
	}
	if errs != nil {
		return e.finish(turnID, source, tenant, ops, errs)
	}
	return e.succeed(turnID, source, tenant, ops, turn)
}

// applyReversible is step 2. The index journals every change the
// reversible ops make; on a failure the journal is rolled back, which
// restores pin counts, TTLs, expiries and transient flags exactly, and the
// per-op errors are returned.
func (e *Executor) applyReversible(ix *cache.Index, tenant string, ops []*op, st *turnState) []*errcode.Error {
	ix.BeginJournal()
	for i, o := range ops {
		if !kinds[o.kind].reversible {
			continue
		}
		if err := applyOne(ix, tenant, o); err != nil {
			ix.RollbackJournal()
			errs := make([]*errcode.Error, len(ops))
			errs[i] = err.At(i)
			return errs
		}
	}
	// Splices are planned last, with the journal still open: they see this
	// turn's pins (a pinned page is copied, not edited), and a splice that
	// cannot be reserved (device capacity) still rolls the pins back.
	if failed, err := e.planSplices(ix, st); err != nil {
		ix.RollbackJournal()
		errs := make([]*errcode.Error, len(ops))
		errs[failed.index] = err.At(failed.index)
		return errs
	}
	ix.CommitJournal()
	return nil
}

// applyOne applies a reversible op and sets its effect.
func applyOne(ix *cache.Index, tenant string, o *op) *errcode.Error {
	apply := kinds[o.kind].apply
	if apply == nil {
		return errcode.New(errcode.Internal, "op kind %d is not reversible", o.kind)
	}
	o.eff.Missing = o.missing
	return apply(ix, o, o.target(tenant))
}

// applyCommit is step 3. Check made every op here safe; a block an earlier
// op of this step removed counts as missing. Any other failure is a bug,
// reported as internal on that op and as the turn's error.
func (e *Executor) applyCommit(ix *cache.Index, tenant string, ops []*op, st *turnState) (trans []cache.Transition, freed []cache.Freed, turnErr *errcode.Error) {
	c := &commitStep{e: e, ix: ix, tenant: tenant}
	if len(st.groups) > 0 {
		turnErr = applySplices(ix, st)
	}
	for _, o := range ops {
		commit := kinds[o.kind].commit
		if commit == nil {
			continue
		}
		o.eff.Missing = o.missing
		err := commit(c, o, o.target(tenant))
		switch {
		case err == nil:
		case errors.Is(err, cache.ErrUnknownBlock) && o.spliced:
			// The splices already took the purge's pages.
		case errors.Is(err, cache.ErrUnknownBlock):
			o.eff.Missing += len(o.seqs)
		default:
			e := fromCache(err).At(o.index)
			if e.Code != errcode.Internal {
				e = errcode.Wrap(errcode.Internal, err, "commit step refused an op the check passed").At(o.index)
			}
			if turnErr == nil {
				turnErr = e
			}
		}
	}
	return c.trans, c.freed, turnErr
}

// succeed builds the reply and audit records of an applied turn. turnErr
// is set only if the commit step hit a bug; the reply then says error,
// since "all applied" would be false.
func (e *Executor) succeed(turnID, source, tenant string, ops []*op, turnErr *errcode.Error) directive.TurnReply {
	reply := directive.TurnReply{Status: directive.StatusOK, TurnID: turnID, WorkerID: e.cfg.WorkerID, Results: make([]directive.Result, len(ops))}
	if turnErr != nil {
		reply.Status, reply.Error = directive.StatusError, turnErr
	}
	recs := make([]Record, len(ops))
	now := e.cfg.Now()
	for i, o := range ops {
		r := directive.Result{Index: i, Verb: directive.Verb(o.verb), Status: directive.StatusOK, Effect: o.eff}
		if turnErr != nil && turnErr.Index == i {
			r.Status, r.Error = directive.StatusError, turnErr
		}
		reply.Results[i] = r
		recs[i] = e.record(now, turnID, source, tenant, o, r)
	}
	if err := e.audit(recs); errors.Is(err, ErrNotDurable) {
		reply.Warning = "applied, but its pins or leases could not be saved to disk; a restart now would lose them (" + err.Error() + ")"
	}
	return reply
}

// finish builds the reply and audit records of a refused turn: ops with an
// error carry it, the others turn_aborted.
func (e *Executor) finish(turnID, source, tenant string, ops []*op, errs []*errcode.Error) directive.TurnReply {
	reply := directive.TurnReply{Status: directive.StatusError, TurnID: turnID, WorkerID: e.cfg.WorkerID, Results: make([]directive.Result, len(ops))}
	var first *errcode.Error
	for _, err := range errs {
		if err != nil {
			first = err
			break
		}
	}
	if first == nil { // callers always pass at least one error; stay truthful if not
		first = errcode.New(errcode.Internal, "turn refused without a reason")
	}
	reply.Error = first
	recs := make([]Record, len(ops))
	now := e.cfg.Now()
	for i, o := range ops {
		err := errs[i]
		if err == nil {
			err = errcode.New(errcode.TurnAborted, "directive %d failed", first.Index).At(i)
		}
		r := directive.Result{Index: i, Verb: directive.Verb(o.verb), Status: directive.StatusError, Error: err}
		reply.Results[i] = r
		recs[i] = e.record(now, turnID, source, tenant, o, r)
	}
	_ = e.audit(recs) // a refused turn changed nothing to make durable
	return reply
}

func (e *Executor) record(now time.Time, turnID, source, tenant string, o *op, r directive.Result) Record {
	rec := Record{Time: now, TurnID: turnID, Source: source, Tenant: tenant, Index: o.index, Verb: o.verb, Mode: o.mode,
		Target: o.describe(), Status: r.Status, Effect: r.Effect}
	if r.Error != nil {
		rec.Code, rec.Detail = r.Error.Code, r.Error.Error()
	}
	return rec
}

// skipPurge records why a purge (revoke, prune, think) left pages: a
// client reading "27 skipped" must be able to tell a running request from
// a prefix other sessions share. kept names what res.Kept means for the
// verb: for a revoke, pages with children outside the lease (a prefix
// other sessions share); for a prune or purge, ancestors of a skipped page.
func skipPurge(e *directive.Effect, res cache.PurgeResult, kept directive.SkipReason) {
	e.Skip(directive.SkipLocked, res.Locked)
	e.Skip(directive.SkipPinned, res.Pinned)
	e.Skip(directive.SkipLeased, res.Leased)
	e.Skip(kept, res.Kept)
}
