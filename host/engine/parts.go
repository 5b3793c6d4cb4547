package engine

import (
	"context"
	"slices"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Pages written in parts: a tensor-parallel engine's ranks each hold a
// slice of every page's KV heads (vLLM's workers under
// --tensor-parallel-size), and one host per node serves them all. The
// index keeps whole pages, so a page cached by a one-rank engine serves a
// two-rank one of the same model and the reverse, and the router sees one
// worker with one set of block hashes.
//
// A registration declares its parts (RegisterArgs.Parts, one per rank;
// every process of the engine registers the same count). A save of pages
// [first, first+n) then goes:
//
//   - every part asks AllocatePart(first, part): the first to ask
//     allocates the slots, and the others get the same ones, so each
//     writes its slice of the same staging pages;
//   - every part commits with CommitPart(first, part) once its slice is
//     written; the pages enter the index when the last part commits them,
//     with the same tokens and slots. Until then nothing is committed, so
//     a page is never served with a slice missing;
//   - a part that fails or never commits leaves the save pending: its
//     slots stay the request's and go back to the pool when the request
//     ends. Its later saves are skipped by that part (the connector never
//     commits after a gap), so none of them completes either. The prompt
//     is a miss for every rank next time, never a page with a stale slice.
//
// The parts' commits of one request's saves complete in order: each part
// commits its saves one after another, and the part that completes save
// k+1 committed its part of save k before, which either completed it or
// came before the call that did (and that call returns only when the
// pages are in). So CommitFrom's rule that the pages before first are
// already committed holds.

// maxParts bounds RegisterArgs.Parts: more ranks than any node runs.
const maxParts = 64

// partedSave is one save of several parts: its slots, the hash of its
// last page (the parts' commits must name the same tokens), and which
// parts committed.
type partedSave struct {
	n         int
	slots     []uint32
	last      uint64
	committed []bool
	arrived   int
}

// checkParts validates a registration's parts and returns the count (1
// for 0).
func checkParts(mode Mode, parts int) (int, error) {
	switch {
	case parts <= 1:
		return 1, nil
	case parts > maxParts:
		return 0, errcode.New(errcode.BadRequest, "parts %d: at most %d", parts, maxParts)
	case mode != ModeConnector:
		return 0, errcode.New(errcode.BadRequest, "parts %d: pages written in parts are for connector mode (an arena-mode engine computes in kvpilot's device arena, one process per registration)", parts)
	}
	return parts, nil
}

// checkPart validates a call's part (1..parts) against r's registration.
func checkPart(r *request, part int) error {
	if part < 1 || part > r.reg.parts {
		return errcode.New(errcode.BadRequest, "part %d: registration %s has %d part(s): send 1..%d, or 0 for whole pages", part, r.reg.id, r.reg.parts, r.reg.parts)
	}
	return nil
}

// AllocatePart gives part (1..parts) of request reqID the n device slots
// of the save starting at page first: allocated by the first part to ask,
// the same slots for every other. part 0 is Allocate.
func (s *Service) AllocatePart(ctx context.Context, regID, reqID string, n, first, part int) (Allocated, error) {
	if part == 0 {
		return s.Allocate(ctx, regID, reqID, n)
	}
	r, err := s.requestOf(regID, reqID)
	if err != nil {
		return Allocated{}, err
	}
	if err := checkPart(r, part); err != nil {
		return Allocated{}, err
	}
	if first < 0 {
		return Allocated{}, errcode.New(errcode.BadRequest, "first_page %d", first)
	}
	r.partsMu.Lock()
	defer r.partsMu.Unlock()
	if ps := r.parted[first]; ps != nil {
		if ps.n != n {
			return Allocated{}, errcode.New(errcode.BadRequest, "part %d asks %d pages from page %d of request %.64q; another part allocated %d: the parts must plan the same saves", part, n, first, r.id, ps.n)
		}
		return Allocated{Slots: slices.Clone(ps.slots)}, nil
	}
	a, err := s.Allocate(ctx, regID, reqID, n)
	if err != nil {
		return a, err
	}
	if r.parted == nil {
		r.parted = make(map[int]*partedSave)
	}
	r.parted[first] = &partedSave{n: n, slots: slices.Clone(a.Slots), committed: make([]bool, r.reg.parts)}
	return a, nil
}

// CommitPart records part's commit of the pages [first, first+len(slots))
// of tokens into the slots the parts were allocated; the last part's
// commit puts them in the cache (CommitFrom). part 0 is CommitFrom.
func (s *Service) CommitPart(regID, reqID string, tokens []uint32, first int, slots []uint32, part int) (Committed, error) {
	if part == 0 {
		return s.CommitFrom(regID, reqID, tokens, first, slots)
	}
	r, err := s.enter(regID, reqID)
	if err != nil {
		return Committed{}, err
	}
	defer r.leave()
	if err := checkPart(r, part); err != nil {
		return Committed{}, err
	}
	h, err := s.commitHashes(r, tokens, first, len(slots))
	if err != nil {
		return Committed{}, err
	}
	waiting, err := r.partCommitted(first, slots, h.Sequence[len(h.Sequence)-1], part)
	if err != nil || waiting > 0 {
		return Committed{PartsWaiting: waiting}, err
	}
	return s.commitFrom(r, tokens, h, first, slots)
}

// partCommitted records part's commit of the save from page first and
// returns how many parts have yet to commit it; at 0 the save is done
// with and the caller commits it.
func (r *request) partCommitted(first int, slots []uint32, last uint64, part int) (int, error) {
	r.partsMu.Lock()
	defer r.partsMu.Unlock()
	sv := r.parted[first]
	switch {
	case sv == nil:
		return 0, errcode.New(errcode.InvalidSlot, "part %d commits pages from page %d of request %.64q, which no part allocated (AllocatePart with this first_page), or all parts committed already", part, first, r.id)
	case !slices.Equal(sv.slots, slots):
		return 0, errcode.New(errcode.InvalidSlot, "part %d commits pages from page %d of request %.64q into slots %v; the parts were allocated %v", part, first, r.id, head(slots), head(sv.slots))
	case sv.committed[part-1]:
		return 0, errcode.New(errcode.BadRequest, "part %d committed pages from page %d of request %.64q twice", part, first, r.id)
	case sv.arrived > 0 && sv.last != last:
		return 0, errcode.New(errcode.BadRequest, "part %d commits other tokens than an earlier part for pages from page %d of request %.64q", part, first, r.id)
	}
	sv.last = last
	sv.committed[part-1] = true
	sv.arrived++
	waiting := len(sv.committed) - sv.arrived
	if waiting == 0 {
		delete(r.parted, first)
	}
	return waiting, nil
}

// head is the first few slots of a list, for an error message.
func head(s []uint32) []uint32 { return s[:min(len(s), 8)] }
