package cache

import (
	"errors"
	"fmt"

	"github.com/kvpilot/kvpilot/host/blockid"
)

// Splice edits a session's cached branch: spans of its token
// sequence are replaced, downstream tokens move to new positions, and the
// edited branch enters the index under the hashes of the edited sequence.
// The index plans it and commits it; the bytes are moved in between by the
// caller (host/splice, with the kernels), so the index stays I/O free:
//
//  1. PlanSplice reads the index and returns a SplicePlan: the new pages,
//     which of them re-link an old page in place (same slot, rotated by Δ)
//     and which need a fresh slot filled by row runs (gather→rotate→
//     scatter), the replacement rows the engine must fill, and the old
//     pages the branch drops. It changes nothing, so a refused turn needs
//     no undo.
//  2. The caller assigns fresh slots (AssignSlots), checks the plan is
//     still current (ValidateSplice), and moves the bytes.
//  3. ApplySplice inserts the new pages up to the first page with rows to
//     fill and releases the dropped old pages; CommitSpliceRest inserts the
//     rest once the engine has filled them.
//
// Copy-on-write: a page is edited in place or released only when nothing
// else can see it: no running request holds it (lock_ref), no live pin,
// lease or transition, no other session's cached path runs through it
// (SpliceRequest.SharedLeaves), and the session's path is its only
// descendant. Those rules are closed under ancestry (a page above a shared
// page is shared), so the exclusive pages are a suffix of the path and
// releasing them keeps every tier prefix-closed.

// Splice errors, wrapped with the offending edit.
var (
	// ErrSpliceSpan: an edit's span is outside the session's sequence,
	// empty without a replacement, or reversed.
	ErrSpliceSpan = errors.New("invalid splice span")
	// ErrSpliceOverlap: two edits of one splice overlap.
	ErrSpliceOverlap = errors.New("overlapping splice edits")
	// ErrSpliceSink: an edit starts inside the protected sink prefix.
	ErrSpliceSink = errors.New("splice edit inside the protected sink prefix")
	// ErrSpliceStale: the index changed since the plan was made (a page it
	// moves or releases is gone, moved or now in use); plan again.
	ErrSpliceStale = errors.New("splice plan is stale")
)

// SpliceEdit replaces the span [Start, End) of the session's current
// sequence (positions before any edit of the same splice) with
// Replacement. Forget truncates the cached branch at the edit's start
// instead of keeping what follows (mode forget).
type SpliceEdit struct {
	Start, End  int
	Replacement []uint32
	Forget      bool
}

// SpliceRequest asks for a splice plan.
type SpliceRequest struct {
	Tenant string
	// Tokens is the session's current token sequence: what the edits'
	// positions index. Its full pages, hashed with Salt, name the session's
	// cached path.
	Tokens []uint32
	Salt   blockid.Salt
	// Edits must not overlap; they are applied left to right, each with the
	// running Δ of those before it. Their order in the slice is free.
	Edits []SpliceEdit
	// SinkTokens protects the first positions: no edit may start before.
	SinkTokens int
	// SharedLeaves are the last cached pages (sequence hashes) of other
	// sessions of the tenant: their paths are never edited in place or
	// released.
	SharedLeaves []uint64
	// NoFills ends the new branch before its first replacement row: for a
	// host with no engine to fill replacements (the next request prefills
	// them and what follows).
	NoFills bool
}

// SplicePage is one page of the new branch.
type SplicePage struct {
	Seq, Local uint64
	// Loc is the page's device slot: the old page's slot when InPlace,
	// else the fresh slot given to AssignSlots.
	Loc uint64
	// InPlace: the page is the old page From re-linked under the new
	// hashes, its bytes rotated in place by Delta (when non-zero).
	InPlace bool
	From    uint64
	Delta   int
	// Fill: some rows of the page hold replacement tokens that the engine
	// writes (SpliceFill); the page is committed only after they are.
	Fill bool
}

// RowRun copies Rows consecutive rows from the old page SrcSeq (device slot
// SrcLoc, from row SrcRow) into new page Page (an index into Pages) from row
// DstRow, rotating their RoPE slices by Delta.
type RowRun struct {
	SrcSeq uint64
	SrcLoc uint64
	SrcRow int
	Page   int
	DstRow int
	Rows   int
	Delta  int
}

// SpliceFill is the prefill work of one replacement: Tokens at new
// positions [Position, Position+len(Tokens)), written into pages
// Pages[FirstPage:FirstPage+PageCount] from row FirstOffset of the first.
// Replacement tokens in pages the old and new branch share (identical
// content) or past the cached end are left out.
type SpliceFill struct {
	Edit        int // index in SplicePlan.Edits
	Position    int
	Tokens      []uint32
	FirstPage   int
	PageCount   int
	FirstOffset int
}

// SplicePlan is what PlanSplice returns. Pages, Runs and Fills are in new
// positions; page index i of Pages is page Keep+i of the edited sequence.
type SplicePlan struct {
	Tenant   string
	PageSize int
	// Edits are the request's edits sorted by position.
	Edits []SpliceEdit
	// Tokens is the edited sequence and Hashes its full pages' hashes (the
	// caller hands Tokens to the session; only CachedTokens of it are cached
	// once the splice is done).
	Tokens []uint32
	Hashes blockid.Hashes
	// OldPages is the length of the session's cached path before the
	// splice. Keep pages start the new branch unchanged: those the old and
	// new sequence share, then any of the new sequence's own pages the
	// device already holds (see PlanSplice).
	OldPages int
	Keep     int
	// PrefixLocs are the device slots of the kept pages (0 where a kept page
	// is not on the device), which fills attend to.
	PrefixLocs []uint64
	Pages      []SplicePage
	Runs       []RowRun
	Fills      []SpliceFill
	// FirstFill indexes the first page of Pages with rows to fill
	// (len(Pages) when there are none): pages before it are committed by
	// ApplySplice, the rest by CommitSpliceRest.
	FirstFill int
	// Release lists the old pages the branch drops that nothing else uses,
	// deepest first; ApplySplice removes them from every tier (an InPlace
	// page's device slot passes to its new page).
	Release []uint64
	// SharedPages counts old pages past Keep left in place because others
	// use them (their rows were copied: copy-on-write).
	SharedPages int
	// CachedTokens is how many tokens of Tokens are cached once the splice
	// is done: (Keep+len(Pages))·PageSize.
	CachedTokens int
	// MovedRows counts rows copied by Runs; RotatedRows counts rows whose
	// RoPE slice turns (runs and in-place pages with Δ ≠ 0).
	MovedRows, RotatedRows int
}

// FreshPages counts the pages that need a fresh slot.
func (p *SplicePlan) FreshPages() int {
	n := 0
	for i := range p.Pages {
		if !p.Pages[i].InPlace {
			n++
		}
	}
	return n
}

// AssignSlots gives the pages that are not InPlace their fresh slots, in
// order. len(locs) must be FreshPages().
func (p *SplicePlan) AssignSlots(locs []uint64) error {
	if len(locs) != p.FreshPages() {
		return fmt.Errorf("splice: %d slots for %d fresh pages: %w", len(locs), p.FreshPages(), ErrBadArgument)
	}
	k := 0
	for i := range p.Pages {
		if !p.Pages[i].InPlace {
			p.Pages[i].Loc = locs[k]
			k++
		}
	}
	return nil
}

// Delta is the total position shift of the splice: the new sequence's
// length minus the old one's.
func (p *SplicePlan) Delta() int {
	d := 0
	for _, e := range p.Edits {
		d += len(e.Replacement) - (e.End - e.Start)
	}
	return d
}
