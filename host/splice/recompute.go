package splice

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Recompute: what an amortize splice prefills again of the tokens it keeps.
//
// A kept token's K/V are those its first prefill computed while it
// attended to the removed text, so the cache after a splice is not what a
// re-prefill of the edited sequence would hold, and the model's next
// tokens move (kvpilot bench splice-quality measures by how much, against
// a re-prefill, on a trained model). Recomputing some kept tokens with the
// edited context closes part of that gap:
//
//   - First: the first tokens after each edit, named by the host;
//   - Share: a fraction of the kept tokens after the first edit, the
//     engine recomputing the first of them (the stalest, nearest the edit);
//   - MaxKL: the quality guard, the engine's estimate of what the splice
//     leaves held within a budget (all kept tokens when nothing less will).
//
// A job that recomputes sends one sparse fill order instead of one order
// per replacement: the replacements and the First tokens by position, the
// other kept tokens as candidates when Share or MaxKL asks the engine to
// choose. The engine runs them in position order, each attending to every
// row before it, so an order that recomputes every kept token is a
// re-prefill of the edited tail. The pages from the first one written on
// are committed once it is done.

// ErrRecompute: the splice asks for recompute that the engine cannot do
// (it serves no sparse fill orders, or no fill orders at all).
var ErrRecompute = errors.New("the engine cannot recompute kept tokens")

// Recompute says which kept tokens a splice prefills again.
type Recompute struct {
	// First recomputes the first First tokens after each edit.
	First int
	// Share recomputes that fraction (0..1) of the kept tokens after the
	// first edit, by the engine's staleness ranking.
	Share float64
	// MaxKL is the quality guard's budget (mean KL per token); 0 is off.
	MaxKL float64
}

// Any reports whether r recomputes anything.
func (r Recompute) Any() bool { return r.First > 0 || r.Share > 0 || r.MaxKL > 0 }

// Ranked reports whether the engine must choose (Share or the guard).
func (r Recompute) Ranked() bool { return r.Share > 0 || r.MaxKL > 0 }

// max is the larger of each field: a session's edits in one turn that
// ask for different amounts get the most any of them asked.
func (r Recompute) max(o Recompute) Recompute {
	return Recompute{First: max(r.First, o.First), Share: math.Max(r.Share, o.Share), MaxKL: maxBudget(r.MaxKL, o.MaxKL)}
}

// maxBudget is the tighter of two guard budgets (0 is off).
func maxBudget(a, b float64) float64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return math.Min(a, b)
}

// RecomputeResult is what a splice recomputes. Region counts the kept
// tokens after its first edit in the new branch's pages; Named those the
// host named (First); Planned adds the engine's Share of Region (the
// guard's choice is known only once the order is done). Recomputed and
// EstimatedKL are the engine's report, added once the order completes.
type RecomputeResult struct {
	Asked                  Recompute
	Region, Named, Planned int
	Recomputed             int
	EstimatedKL            float64
	Done                   bool
}

// rule is the job's recompute: the edits' own when any carries one,
// else the tenant's configured rule.
func (s *Splicer) rule(tenant string, edits []Edit) (Recompute, bool) {
	var r Recompute
	explicit := false
	for _, e := range edits {
		if e.Recompute != nil {
			r, explicit = r.max(*e.Recompute), true
		}
	}
	if !explicit && s.cfg.Rule != nil {
		r = s.cfg.Rule(tenant)
	}
	return r, explicit
}

// checkRecompute refuses a recompute the engine cannot do. A connector
// engine's splices take the configured rule's First from the front door
// (its prefill request covers those tokens before the splice), so only a
// directive's own recompute is refused there.
func (s *Splicer) checkRecompute(r Recompute, explicit bool) (Recompute, error) {
	switch {
	case !r.Any() || s.cfg.Recompute:
		return r, nil
	case s.cfg.Fill == nil && !explicit:
		return Recompute{}, nil
	case s.cfg.Fill == nil:
		return r, fmt.Errorf("%w: it serves no fill orders (a connector engine: the front door recomputes splice.recompute.first with its prefill request)", ErrRecompute)
	}
	return r, fmt.Errorf("%w: it did not register recompute (sparse fill orders)", ErrRecompute)
}

// sparseOrder builds the job's one sparse order and the result's counts,
// or nil when the plan leaves nothing to fill or recompute. It lowers
// FirstFill to the first page the order writes.
func (j *Job) sparseOrder(r Recompute) *FillOrder {
	p := j.plan
	P := p.PageSize
	lo, hi := p.Keep*P, p.CachedTokens // the new branch's own pages
	if hi <= lo {
		return nil
	}
	// Replacement positions in the edited sequence, per edit.
	filled := map[int]bool{}
	type span struct{ start, end int } // an edit's replacement, new positions
	var spans []span
	shift := 0
	for _, e := range p.Edits {
		at := e.Start + shift
		spans = append(spans, span{at, at + len(e.Replacement)})
		for q := at; q < at+len(e.Replacement); q++ {
			filled[q] = true
		}
		shift += len(e.Replacement) - (e.End - e.Start)
		if e.Forget {
			break // the branch ends here
		}
	}
	first := max(spans[0].start, lo)
	var named, cand []int
	var order []int
	for q := first; q < hi; q++ {
		if filled[q] {
			order = append(order, q)
		}
	}
	for k, sp := range spans {
		end := hi
		if k+1 < len(spans) {
			end = min(end, spans[k+1].start)
		}
		for q := max(sp.end, lo); q < end && q < sp.end+r.First; q++ {
			named = append(named, q)
		}
	}
	isNamed := map[int]bool{}
	for _, q := range named {
		isNamed[q] = true
	}
	region := 0
	for q := first; q < hi; q++ {
		if filled[q] {
			continue
		}
		region++
		if !isNamed[q] && r.Ranked() {
			cand = append(cand, q)
		}
	}
	order = append(order, named...)
	slices.Sort(order)
	if len(order) == 0 && len(cand) == 0 {
		return nil
	}
	start, last := math.MaxInt, -1
	for _, xs := range [][]int{order, cand} {
		if len(xs) > 0 {
			start, last = min(start, xs[0]), max(last, xs[len(xs)-1])
		}
	}
	firstPage, lastPage := start/P-p.Keep, last/P-p.Keep
	o := &FillOrder{Session: j.snap.Session.ID, Tenant: p.Tenant, Position: start, FirstOffset: start % P}
	for _, l := range p.PrefixLocs {
		o.PrefixPageSlots = append(o.PrefixPageSlots, uint32(l))
	}
	for _, pg := range p.Pages[:firstPage] {
		o.PrefixPageSlots = append(o.PrefixPageSlots, uint32(pg.Loc))
	}
	for _, pg := range p.Pages[firstPage : lastPage+1] {
		o.PageSlots = append(o.PageSlots, uint32(pg.Loc))
	}
	for _, q := range order {
		o.Positions = append(o.Positions, uint32(q))
		o.Tokens = append(o.Tokens, p.Tokens[q])
	}
	if len(cand) > 0 {
		c := &Candidates{Share: r.Share, MaxKL: r.MaxKL, Region: region}
		var echo []bool
		if r.MaxKL > 0 {
			echo = echoes(p.Tokens, first, hi, j.removed())
		}
		for _, q := range cand {
			c.Positions = append(c.Positions, uint32(q))
			c.Tokens = append(c.Tokens, p.Tokens[q])
			if echo != nil && echo[q-first] {
				c.Echo = append(c.Echo, uint32(q))
			}
		}
		o.Candidates = c
	}
	p.FirstFill = min(p.FirstFill, firstPage)
	planned := len(named)
	if r.Share > 0 {
		planned += min(len(cand), int(math.Round(r.Share*float64(region))))
	}
	j.res.Recompute = RecomputeResult{Asked: r, Region: region, Named: len(named), Planned: planned}
	return o
}

// removed is the text the plan's edits take out of the session.
func (j *Job) removed() [][]uint32 {
	toks := j.snap.Session.Tokens
	var out [][]uint32
	for _, e := range j.plan.Edits {
		if e.End > e.Start && e.End <= len(toks) {
			out = append(out, toks[e.Start:e.End])
		}
	}
	return out
}

// replacementOrders are the plan's fills as one order each (no recompute).
func (j *Job) replacementOrders() []FillOrder {
	p := j.plan
	var out []FillOrder
	for _, f := range p.Fills {
		o := FillOrder{Session: j.snap.Session.ID, Tenant: p.Tenant, Position: f.Position, Tokens: f.Tokens, FirstOffset: f.FirstOffset}
		for _, l := range p.PrefixLocs {
			o.PrefixPageSlots = append(o.PrefixPageSlots, uint32(l))
		}
		for _, pg := range p.Pages[:f.FirstPage] {
			o.PrefixPageSlots = append(o.PrefixPageSlots, uint32(pg.Loc))
		}
		for _, pg := range p.Pages[f.FirstPage : f.FirstPage+f.PageCount] {
			o.PageSlots = append(o.PageSlots, uint32(pg.Loc))
		}
		out = append(out, o)
	}
	return out
}

// planOrders sets the job's orders once its pages have slots.
func (j *Job) planOrders(r Recompute) {
	if r.Any() && j.s.cfg.Fill != nil {
		if o := j.sparseOrder(r); o != nil {
			j.orders = []FillOrder{*o}
			return
		}
	}
	j.orders = j.replacementOrders()
}

// addFill records an order's completion in the result.
func (r *RecomputeResult) addFill(o FillOrder, fr FillResult) {
	if len(o.Positions) == 0 && o.Candidates == nil {
		return
	}
	r.Recomputed = r.Named + fr.Recomputed
	r.EstimatedKL = fr.EstimatedKL
	r.Done = true
}
