package cache

import (
	"fmt"
	"slices"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

// segment is a run of new positions [start, end) that comes either from
// the old sequence (src is the old position of start, shifted by delta) or
// from edit's replacement (src < 0).
type segment struct {
	start, end int
	src        int
	delta      int
	edit       int
}

// PlanSplice plans a splice of the session whose sequence is req.Tokens.
// It reads the index and changes nothing. The new branch keeps every page
// it can: pages the edited sequence shares with the old one stay, and so
// do the edited sequence's own pages already on the device (adopted: the
// engine prefilled them ahead of the splice); Keep counts both. After
// them, each new page takes its rows from device-resident old pages
// (moved by Δ), or from a replacement the engine fills. The branch ends at
// the last row that can be kept: where the device copy of the old path
// ends, at the first Forget edit, or before replacement rows that no kept
// row follows (the next request prefills those anyway). Pages of the old
// path past Keep that nothing else uses are released.
func (ix *Index) PlanSplice(req SpliceRequest) (*SplicePlan, error) {
	P := ix.cfg.PageSize
	edits, err := sortEdits(req.Edits, len(req.Tokens), req.SinkTokens)
	if err != nil {
		return nil, err
	}
	plan := &SplicePlan{Tenant: req.Tenant, PageSize: P, Edits: edits}
	segs, forgetCut := buildSegments(req.Tokens, edits, &plan.Tokens)
	old := blockid.Compute(req.Tokens, P, req.Salt)
	plan.Hashes = blockid.Compute(plan.Tokens, P, req.Salt)

	path := ix.walkPath(req.Tenant, old)
	n := len(path)
	plan.OldPages = n
	keep := 0
	for keep < n && keep < len(plan.Hashes.Sequence) && plan.Hashes.Sequence[keep] == old.Sequence[keep] {
		keep++
	}
	if forgetCut >= 0 {
		keep = min(keep, forgetCut/P)
	}
	devPages := 0 // the device copy of a path is a prefix of it (prefix closure)
	for devPages < n && path[devPages].resident.Has(tier.Device) {
		devPages++
	}

	// The edited sequence's own pages already on the device start the new
	// branch too (adopted): an engine that serves no fill orders prefills
	// the replacement as a request of its own before the splice, and the
	// splice builds on what that request cached.
	newPath, adopt := path[:keep], keep
	if keep <= devPages {
		newPath = ix.walkPath(req.Tenant, plan.Hashes)
		limit := len(newPath)
		if forgetCut >= 0 {
			limit = min(limit, forgetCut/P)
		}
		for adopt < limit && newPath[adopt].resident.Has(tier.Device) {
			adopt++
		}
	}

	newPages := max(adopt, cacheEnd(segs, forgetCut, len(plan.Tokens), devPages*P)/P)
	if keep > devPages {
		// New device pages need their parent on the device (prefix
		// closure), and fills attend to the kept prefix there.
		newPages = keep
	}
	if req.NoFills {
		for _, s := range segs {
			if lo := max(s.start, adopt*P); s.src < 0 && lo < min(s.end, newPages*P) {
				newPages = max(adopt, lo/P)
				break
			}
		}
	}
	plan.Keep = adopt
	plan.PrefixLocs = make([]uint64, adopt)
	for k := 0; k < adopt; k++ {
		if newPath[k].resident.Has(tier.Device) {
			plan.PrefixLocs[k] = newPath[k].loc[tier.Device]
		}
	}

	// Copy-on-write and release look at the old path past the pages the
	// two sequences share, adopted pages or not.
	ex := ix.exclusive(path, keep, req.Tenant, req.SharedLeaves)
	ix.planPages(plan, segs, path, ex, newPages)
	plan.FirstFill = len(plan.Pages)
	for _, s := range segs {
		lo, hi := max(s.start, adopt*P), min(s.end, newPages*P)
		if s.src >= 0 || lo >= hi {
			continue
		}
		f := SpliceFill{Edit: s.edit, Position: lo, Tokens: edits[s.edit].Replacement[lo-s.start : hi-s.start],
			FirstPage: lo/P - adopt, PageCount: (hi-1)/P - lo/P + 1, FirstOffset: lo % P}
		plan.Fills = append(plan.Fills, f)
		plan.FirstFill = min(plan.FirstFill, f.FirstPage)
	}
	for k := n - 1; k >= keep; k-- {
		if ex[k] {
			plan.Release = append(plan.Release, path[k].seq)
		} else {
			plan.SharedPages++
		}
	}
	plan.CachedTokens = (adopt + len(plan.Pages)) * P
	return plan, nil
}

// sortEdits validates the edits against a sequence of n tokens and
// returns them sorted by position.
func sortEdits(in []SpliceEdit, n, sink int) ([]SpliceEdit, error) {
	edits := slices.Clone(in)
	slices.SortStableFunc(edits, func(a, b SpliceEdit) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		return a.End - b.End
	})
	for k, e := range edits {
		switch {
		case e.Start < 0 || e.End < e.Start || e.End > n:
			return nil, fmt.Errorf("splice edit [%d, %d) of a %d-token sequence: %w", e.Start, e.End, n, ErrSpliceSpan)
		case e.Start == e.End && len(e.Replacement) == 0:
			return nil, fmt.Errorf("splice edit [%d, %d) removes nothing and inserts nothing: %w", e.Start, e.End, ErrSpliceSpan)
		case e.Start < sink:
			return nil, fmt.Errorf("splice edit [%d, %d): the first %d tokens are protected: %w", e.Start, e.End, sink, ErrSpliceSink)
		}
		if k == 0 {
			continue
		}
		p := edits[k-1]
		if e.Start < p.End || (e.Start == e.End && p.Start == p.End && e.Start == p.Start) {
			return nil, fmt.Errorf("splice edits [%d, %d) and [%d, %d): %w", p.Start, p.End, e.Start, e.End, ErrSpliceOverlap)
		}
	}
	return edits, nil
}

// buildSegments applies the edits to tokens left to right, writing the
// edited sequence to *out, and returns its segments in new positions and
// the new position where the first Forget edit starts (-1 if none).
func buildSegments(tokens []uint32, edits []SpliceEdit, out *[]uint32) (segs []segment, forgetCut int) {
	forgetCut = -1
	pos, d := 0, 0
	var nt []uint32
	for k, e := range edits {
		if e.Start > pos {
			segs = append(segs, segment{start: pos + d, end: e.Start + d, src: pos, delta: d})
		}
		nt = append(nt, tokens[pos:e.Start]...)
		if r := len(e.Replacement); r > 0 {
			segs = append(segs, segment{start: e.Start + d, end: e.Start + d + r, src: -1, edit: k})
		}
		if e.Forget && forgetCut < 0 {
			forgetCut = e.Start + d
		}
		nt = append(nt, e.Replacement...)
		d += len(e.Replacement) - (e.End - e.Start)
		pos = e.End
	}
	if len(tokens) > pos {
		segs = append(segs, segment{start: pos + d, end: len(tokens) + d, src: pos, delta: d})
	}
	*out = append(nt, tokens[pos:]...)
	return segs, forgetCut
}

// cacheEnd is the new position just after the last row the new branch can
// keep: rows from the old sequence while their source is on the device
// (below devTok), up to the forget cut; replacement rows count only when
// a kept row follows them.
func cacheEnd(segs []segment, forgetCut, total, devTok int) int {
	limit := total
	if forgetCut >= 0 {
		limit = forgetCut
	}
	end := 0
	for _, s := range segs {
		if s.start >= limit {
			break
		}
		if s.src < 0 {
			continue
		}
		hi := min(s.end, limit)
		avail := devTok - s.src
		if avail <= 0 {
			break
		}
		if hi-s.start > avail {
			return s.start + avail
		}
		end = hi
	}
	return end
}

// walkPath returns the cached pages of the sequence hashed as h: the
// longest path from the tenant root.
func (ix *Index) walkPath(tenant string, h blockid.Hashes) []*node {
	ts := ix.tenant(tenant)
	if ts == nil {
		return nil
	}
	var path []*node
	parent := &ts.root
	for i, seq := range h.Sequence {
		c := ts.bySeq[seq]
		if c == nil || c.parent != parent || c.local != h.Local[i] {
			break
		}
		path = append(path, c)
		parent = c
	}
	return path
}

// exclusive reports, for each page of path from keep on, whether the
// splice may edit it in place or release it: nothing else can see it (see
// the Splice rules in splice.go). Pages before keep are reported false.
func (ix *Index) exclusive(path []*node, keep int, tenant string, sharedLeaves []uint64) []bool {
	n := len(path)
	ex := make([]bool, n)
	if keep >= n {
		return ex
	}
	epoch := ix.nextEpoch()
	if ts := ix.tenant(tenant); ts != nil {
		for _, leaf := range sharedLeaves {
			for c := ts.bySeq[leaf]; c != nil && !c.isRoot && c.mark != epoch; c = c.parent {
				c.mark = epoch
			}
		}
	}
	now := ix.clock.Now()
	for k := n - 1; k >= keep; k-- {
		c := path[k]
		ok := c.lockRef == 0 && !c.pinned(now) && c.r().leaseRefs == 0 && c.pending == 0 && c.mark != epoch
		if k == n-1 {
			ok = ok && c.nchildren == 0
		} else {
			ok = ok && c.nchildren == 1 && ex[k+1]
		}
		ex[k] = ok
	}
	return ex
}

// planPages fills plan.Pages and plan.Runs for new pages [plan.Keep,
// newPages). A page whose rows all come, in order and with one Δ, from one
// exclusive old page re-links that page in place; any other page gets a
// fresh slot and row runs.
func (ix *Index) planPages(plan *SplicePlan, segs []segment, path []*node, ex []bool, newPages int) {
	P := plan.PageSize
	si := 0
	for q := plan.Keep; q < newPages; q++ {
		pg := SplicePage{Seq: plan.Hashes.Sequence[q], Local: plan.Hashes.Local[q]}
		pi := q - plan.Keep
		first, lastSP := len(plan.Runs), -1
		for t := 0; t < P; {
			pos := q*P + t
			for segs[si].end <= pos {
				si++
			}
			s := segs[si]
			rows := min(s.end, (q+1)*P) - pos
			if s.src < 0 {
				pg.Fill = true
				t += rows
				continue
			}
			src := s.src + pos - s.start
			for rows > 0 {
				sp, sr := src/P, src%P
				m := min(rows, P-sr)
				plan.Runs = append(plan.Runs, RowRun{SrcSeq: path[sp].seq, SrcLoc: path[sp].loc[tier.Device],
					SrcRow: sr, Page: pi, DstRow: t, Rows: m, Delta: s.delta})
				lastSP = sp
				t, src, rows = t+m, src+m, rows-m
			}
		}
		if len(plan.Runs)-first == 1 {
			r := plan.Runs[first]
			if sp := lastSP; r.Rows == P && r.SrcRow == 0 && ex[sp] {
				pg.InPlace, pg.From, pg.Loc, pg.Delta = true, r.SrcSeq, r.SrcLoc, r.Delta
				plan.Runs = plan.Runs[:first]
				if r.Delta != 0 {
					plan.RotatedRows += P
				}
			}
		}
		plan.Pages = append(plan.Pages, pg)
	}
	for _, r := range plan.Runs {
		plan.MovedRows += r.Rows
		if r.Delta != 0 {
			plan.RotatedRows += r.Rows
		}
	}
}
