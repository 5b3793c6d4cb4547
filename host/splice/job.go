package splice

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
)

// Result describes a splice.
type Result struct {
	Session string
	// Tokens is the length of the edited sequence; Delta its change.
	Tokens, Delta int
	// CachedTokens is how many of its tokens are cached once the fills
	// are done (full pages).
	CachedTokens int
	// Kept counts pages shared unchanged by the old and new branch;
	// NewPages the pages of the new branch after them, InPlace of which
	// re-linked an old page in place.
	Kept, NewPages, InPlace int
	// Released counts old pages removed; Shared old pages left to others.
	Released, Shared int
	// MovedRows and RotatedRows count token rows copied and rotated;
	// MovedBytes and RotatedBytes the bytes written (whole rows copied,
	// RoPE slices rotated).
	MovedRows, RotatedRows   int
	MovedBytes, RotatedBytes int64
	// Fills counts fill orders; FillTokens their tokens.
	Fills, FillTokens int
	// Recompute is what the splice recomputes of its kept tokens.
	Recompute RecomputeResult
}

// Job is one session's splice between Plan and Finish.
type Job struct {
	s       *Splicer
	snap    Snapshot
	plan    *cache.SplicePlan
	fresh   []pool.Slot
	applied bool
	freed   []cache.Freed
	// locked is the page locked while fills run (its path is what they
	// attend to); hasLock when one is held.
	locked  uint64
	hasLock bool
	res     Result
	// orders are the fill orders to send once applied: one per
	// replacement, or one sparse order when the job recomputes.
	orders []FillOrder
}

// Plan plans a splice of the snapshotted session and reserves its fresh
// device pages. ix is the index the caller holds (inside guarded's Do);
// the caller ends the job with Apply or Cancel under the same hold.
// Nothing in the index changes here.
func (s *Splicer) Plan(ix *cache.Index, snap Snapshot, edits []Edit) (*Job, error) {
	if s.cfg.Device == nil {
		return nil, ErrNoDevice
	}
	sess := snap.Session
	rule, explicit := s.rule(sess.Tenant, edits)
	rule, err := s.checkRecompute(rule, explicit)
	if err != nil {
		return nil, fmt.Errorf("splice session %q: %w", sess.ID, err)
	}
	req := cache.SpliceRequest{Tenant: sess.Tenant, Tokens: sess.Tokens, Salt: s.cfg.Salt(sess.Tenant),
		SinkTokens: s.cfg.SinkTokens, SharedLeaves: snap.Leaves, NoFills: s.cfg.Fill == nil}
	for _, e := range edits {
		req.Edits = append(req.Edits, cache.SpliceEdit{Start: e.Start, End: e.End, Replacement: e.Replacement, Forget: e.Mode == Forget})
	}
	plan, err := ix.PlanSplice(req)
	if err != nil {
		return nil, fmt.Errorf("splice session %q: %w", sess.ID, err)
	}
	j := &Job{s: s, snap: snap, plan: plan}
	if n := plan.FreshPages(); n > 0 {
		if j.fresh, err = s.cfg.Device.Pool.Alloc(nil, n); err != nil {
			return nil, fmt.Errorf("splice session %q needs %d fresh device pages: %w: %w", sess.ID, n, ErrCapacity, err)
		}
		locs := make([]uint64, n)
		for i, sl := range j.fresh {
			locs[i] = uint64(sl)
		}
		if err := plan.AssignSlots(locs); err != nil {
			j.Cancel()
			return nil, err
		}
	}
	j.res = s.result(sess.ID, plan)
	j.planOrders(rule)
	j.res.Fills = len(j.orders)
	return j, nil
}

func (s *Splicer) result(id string, p *cache.SplicePlan) Result {
	r := Result{Session: id, Tokens: len(p.Tokens), Delta: p.Delta(), CachedTokens: p.CachedTokens,
		Kept: p.Keep, NewPages: len(p.Pages), Released: len(p.Release), Shared: p.SharedPages,
		MovedRows: p.MovedRows, RotatedRows: p.RotatedRows, Fills: len(p.Fills)}
	for i := range p.Pages {
		if p.Pages[i].InPlace {
			r.InPlace++
		}
	}
	for _, f := range p.Fills {
		r.FillTokens += len(f.Tokens)
	}
	r.MovedBytes = int64(p.MovedRows) * int64(s.cfg.Device.TokenBytes())
	r.RotatedBytes = int64(p.RotatedRows) * int64(s.cfg.Device.RopeBytes())
	return r
}

// Applied reports whether Apply ran (even if it failed): the job must
// then go to Finish, which updates the session and frees what it released.
func (j *Job) Applied() bool { return j.applied }

// Result is what the job did (or will do, before Apply).
func (j *Job) Result() Result { return j.res }

// Plan returns the index plan (read only).
func (j *Job) Plan() *cache.SplicePlan { return j.plan }

// Cancel frees the job's reserved pages. For a job that was not applied.
func (j *Job) Cancel() {
	if j.applied || len(j.fresh) == 0 {
		return
	}
	// Slots the pool gave us a moment ago: a failure is a pool bug.
	_ = j.s.cfg.Device.Pool.Free(j.fresh...)
	j.fresh = nil
}

// Apply moves the bytes and commits the plan, in ix, the index the caller
// holds since Plan. On an error the index is left consistent: a stale plan changed
// nothing (cancel the job); a kernel failure, which may have rotated some
// pages already, drops the edited pages instead of keeping them under
// their old hashes.
func (j *Job) Apply(ix *cache.Index) error {
	s, p := j.s, j.plan
	if err := ix.ValidateSplice(p); err != nil {
		return fmt.Errorf("splice session %q: %w", j.snap.Session.ID, err)
	}
	if err := s.cfg.Device.Execute(p); err != nil {
		return j.abort(ix, err)
	}
	commit, err := ix.ApplySplice(p)
	j.applied = true
	j.freed = commit.Freed
	j.freeDevice(commit.Unused)
	if err != nil {
		j.freeDevice(j.restLocs())
		j.plan.Fills, j.orders, j.res.Fills, j.res.FillTokens = nil, nil, 0, 0
		return fmt.Errorf("splice session %q: commit: %w", j.snap.Session.ID, err)
	}
	if j.pendingFills() {
		if at := p.Keep + p.FirstFill; at > 0 {
			j.locked = p.Hashes.Sequence[at-1]
			if _, err := ix.Lock(p.Tenant, j.locked); err != nil {
				j.freeDevice(j.restLocs())
				j.plan.Fills, j.orders = nil, nil
				return fmt.Errorf("splice session %q: lock the branch for its fills: %w", j.snap.Session.ID, err)
			}
			j.hasLock = true
		}
	}
	return nil
}

// abort handles a kernel failure: the old pages the plan releases are
// released anyway (a re-linked one may be half rotated), nothing new is
// committed, and every reserved page is freed.
func (j *Job) abort(ix *cache.Index, kerr error) error {
	cut := *j.plan
	cut.Pages, cut.Runs, cut.Fills, cut.FirstFill = nil, nil, nil, 0
	commit, err := ix.ApplySplice(&cut)
	j.applied = true
	j.freed = commit.Freed
	j.freeDevice(commit.Unused)
	var locs []uint64
	for _, sl := range j.fresh {
		locs = append(locs, uint64(sl))
	}
	j.freeDevice(locs)
	j.plan = &cut
	j.orders = nil
	j.res.CachedTokens, j.res.NewPages, j.res.InPlace, j.res.Fills = cut.CachedTokens, 0, 0, 0
	return fmt.Errorf("splice session %q: kernels: %w", j.snap.Session.ID, errors.Join(kerr, err))
}

// restLocs are the slots of the pages committed after the fills.
func (j *Job) restLocs() []uint64 {
	var locs []uint64
	for _, pg := range j.plan.Pages[j.plan.FirstFill:] {
		locs = append(locs, pg.Loc)
	}
	return locs
}

func (j *Job) freeDevice(locs []uint64) {
	if len(locs) == 0 {
		return
	}
	slots := make([]pool.Slot, len(locs))
	for i, l := range locs {
		slots[i] = pool.Slot(l)
	}
	// The index no longer refers to these slots; a failure is a pool bug.
	_ = j.s.cfg.Device.Pool.Free(slots...)
}

func (j *Job) pendingFills() bool { return j.applied && len(j.orders) > 0 }

// committedTokens is how much of the edited sequence the index holds now.
func (j *Job) committedTokens() int {
	if j.pendingFills() {
		return (j.plan.Keep + j.plan.FirstFill) * j.plan.PageSize
	}
	return (j.plan.Keep + len(j.plan.Pages)) * j.plan.PageSize
}

// complete is Finish's synchronous part, outside the index lock.
func (s *Splicer) complete(j *Job) {
	if !j.applied {
		return
	}
	sess := j.snap.Session
	s.cfg.Sessions.SetSession(Session{ID: sess.ID, Tenant: sess.Tenant, Tokens: j.plan.Tokens, Cached: j.committedTokens()})
	if len(j.freed) > 0 && s.cfg.Free != nil {
		s.cfg.Free(j.freed)
	}
	j.freed = nil
}

// runFills sends the job's fill orders in order, then commits the rest of
// the branch. On a failure the rest is dropped (its slots freed) and the
// session stays cached up to the first replacement.
func (s *Splicer) runFills(ctx context.Context, j *Job) error {
	p := j.plan
	var err error
	for _, o := range j.orders {
		var fr FillResult
		if fr, err = s.cfg.Fill(ctx, o); err != nil {
			err = fmt.Errorf("splice session %q: fill of %d tokens at %d: %w: %w", o.Session, len(o.Tokens), o.Position, ErrFill, err)
			break
		}
		j.res.Recompute.addFill(o, fr)
	}
	if j.res.Recompute.Done && s.cfg.OnRecompute != nil {
		s.cfg.OnRecompute(j.snap.Session.ID, j.res.Recompute)
	}
	var commit cache.SpliceCommit
	s.cfg.Index.Do(func(ix *cache.Index) {
		if err == nil {
			commit, err = ix.CommitSpliceRest(p)
		} else {
			commit.Unused = j.restLocs()
		}
		if j.hasLock {
			if _, uerr := ix.Unlock(p.Tenant, j.locked); uerr != nil {
				err = errors.Join(err, uerr)
			}
			j.hasLock = false
		}
	})
	j.freeDevice(commit.Unused)
	cached := (p.Keep + p.FirstFill) * p.PageSize
	if err == nil {
		cached = p.CachedTokens
	}
	// Only when the session still holds the edited sequence: a request may
	// have replaced it meanwhile.
	if cur, ok := s.cfg.Sessions.Session(j.snap.Session.ID); ok && slices.Equal(cur.Tokens, p.Tokens) {
		cur.Cached = cached
		s.cfg.Sessions.SetSession(cur)
	}
	j.plan.Fills, j.orders = nil, nil
	return err
}
