package executor

import (
	"errors"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// turn is one turn as the executor runs it: its ops, and what it reads
// once for all of them.
type turn struct {
	e                  *Executor
	att                *Attachments // the one snapshot of the attachments the turn uses
	id, source, tenant string
	ops                []op
	st                 turnState
}

func (e *Executor) newTurn(id, source, tenant string, ops []op) *turn {
	return &turn{e: e, att: e.attached.Load(), id: id, source: source, tenant: tenant, ops: ops}
}

// run checks and applies the turn's ops, then hands off transitions and
// freed slots and writes the audit records.
func (e *Executor) run(t *turn) directive.TurnReply {
	var (
		errs    []*errcode.Error
		trans   []cache.Transition
		freed   []cache.Freed
		turnErr *errcode.Error
	)
	t.prefetch() // sessions are read before the index lock
	e.cfg.Index.Do(func(ix *cache.Index) {
		errs = t.check(ix)
		if errs == nil {
			errs = t.applyReversible(ix)
		}
		if errs == nil {
			trans, freed, turnErr = t.applyCommit(ix)
		}
	})
	if len(t.st.jobs) > 0 {
		// Sessions updated, released slots freed, fills started.
		t.att.Splicer.Finish(t.st.jobs...)
	}
	// Only a Warm or a Resume plans transitions, and their check refused
	// them when this snapshot had no Transitions.
	if len(trans) > 0 {
		t.att.Transitions(trans)
	}
	if len(freed) > 0 && t.att.Free != nil {
		t.att.Free(freed)
	}
	if errs != nil {
		return e.finish(t.id, t.source, t.tenant, t.ops, errs)
	}
	return e.succeed(t.id, t.source, t.tenant, t.ops, turnErr)
}

// applyReversible is step 2. The index journals every change the
// reversible ops make; on a failure the journal is rolled back, which
// restores pin counts, TTLs, expiries and transient flags exactly, and the
// per-op errors are returned.
func (t *turn) applyReversible(ix *cache.Index) []*errcode.Error {
	ix.BeginJournal()
	for i, o := range t.ops {
		r, ok := o.(reversible)
		if !ok {
			continue
		}
		if err := r.apply(ix, t.tenant); err != nil {
			ix.RollbackJournal()
			errs := make([]*errcode.Error, len(t.ops))
			errs[i] = err.At(i)
			return errs
		}
	}
	// Splices are planned last, with the journal still open: they see this
	// turn's pins (a pinned page is copied, not edited), and a splice that
	// cannot be reserved (device capacity) still rolls the pins back.
	if failed, err := t.planSplices(ix); err != nil {
		ix.RollbackJournal()
		i := failed.base().index
		errs := make([]*errcode.Error, len(t.ops))
		errs[i] = err.At(i)
		return errs
	}
	ix.CommitJournal()
	return nil
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

// applyCommit is step 3: the splices first, then the committed ops in
// turn order. Check made every op here safe; a block an earlier op of this
// step removed counts as missing. Any other failure is a bug, reported as
// internal on that op and as the turn's error.
func (t *turn) applyCommit(ix *cache.Index) (trans []cache.Transition, freed []cache.Freed, turnErr *errcode.Error) {
	c := &commitStep{e: t.e, ix: ix, tenant: t.tenant}
	if len(t.st.groups) > 0 {
		turnErr = applySplices(ix, &t.st)
	}
	for _, o := range t.ops {
		co, ok := o.(committed)
		if !ok {
			continue
		}
		err := co.commit(c)
		switch {
		case err == nil:
		case errors.Is(err, cache.ErrUnknownBlock):
			// Pages an earlier op of this step removed count as missing,
			// unless a purge's own splices took them.
			if pu, ok := o.(*purgeOp); !ok || !pu.spliced {
				if p, ok := o.(paged); ok {
					o.base().eff.Missing += len(p.pagesOf().seqs)
				}
			}
		default:
			i := o.base().index
			e := fromCache(err).At(i)
			if e.Code != errcode.Internal {
				e = errcode.Wrap(errcode.Internal, err, "commit step refused an op the check passed").At(i)
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
func (e *Executor) succeed(turnID, source, tenant string, ops []op, turnErr *errcode.Error) directive.TurnReply {
	reply := directive.TurnReply{Status: directive.StatusOK, TurnID: turnID, WorkerID: e.cfg.WorkerID, Results: make([]directive.Result, len(ops))}
	if turnErr != nil {
		reply.Status, reply.Error = directive.StatusError, turnErr
	}
	recs := make([]Record, len(ops))
	now := e.cfg.Now()
	for i, o := range ops {
		r := directive.Result{Index: i, Verb: directive.Verb(o.base().verb), Status: directive.StatusOK, Effect: o.base().eff}
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
func (e *Executor) finish(turnID, source, tenant string, ops []op, errs []*errcode.Error) directive.TurnReply {
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
		r := directive.Result{Index: i, Verb: directive.Verb(o.base().verb), Status: directive.StatusError, Error: err}
		reply.Results[i] = r
		recs[i] = e.record(now, turnID, source, tenant, o, r)
	}
	_ = e.audit(recs) // a refused turn changed nothing to make durable
	return reply
}

func (e *Executor) record(now time.Time, turnID, source, tenant string, o op, r directive.Result) Record {
	b := o.base()
	rec := Record{Time: now, TurnID: turnID, Source: source, Tenant: tenant, Index: b.index, Verb: b.verb, Mode: b.mode,
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
