package splice

import (
	"context"
	"hash/maphash"
	"slices"
)

// Span is a chat message's token span [Start, End) in a sequence.
type Span struct{ Start, End int }

// maxDiffMessages bounds the message-level alignment (quadratic in the
// number of messages); longer conversations fall back to token level.
const maxDiffMessages = 1024

// Diff derives the edits that turn a session's cached sequence old into a
// prefix of its next request new (session diff): applying
// them to old, left to right, gives new[:k] for some k. When both
// sequences come with message spans, messages with equal tokens are
// aligned (longest common subsequence) and each gap between aligned
// messages that differs becomes one edit, trimmed to the tokens that
// differ; otherwise the edit is the part between the common prefix and the
// common suffix. A last edit may truncate old where new stops matching
// it; edits all ending at len(old) keep nothing downstream (see Worth).
// Mode is Amortize. Invalid spans fall back to token level.
func Diff(old []uint32, oldMsgs []Span, new []uint32, newMsgs []Span) []Edit {
	if len(oldMsgs) > 0 && len(newMsgs) > 0 && len(oldMsgs) <= maxDiffMessages && len(newMsgs) <= maxDiffMessages &&
		validSpans(oldMsgs, len(old)) && validSpans(newMsgs, len(new)) {
		return diffMessages(old, oldMsgs, new, newMsgs)
	}
	return diffTokens(old, new)
}

// Worth reports whether splicing edits keeps anything: some edit is
// followed by cached tokens of old (of oldLen) that would otherwise be
// re-prefilled, and none starts inside the sink.
func Worth(edits []Edit, oldLen, sink int) bool {
	worth := false
	for _, e := range edits {
		if e.Start < sink {
			return false
		}
		if e.End < oldLen {
			worth = true
		}
	}
	return worth
}

func diffTokens(old, new []uint32) []Edit {
	p := CommonPrefix(old, new)
	if p == len(old) {
		return nil // new extends old
	}
	s := CommonSuffix(old[p:], new[p:])
	return []Edit{{Start: p, End: len(old) - s, Replacement: slices.Clone(new[p : len(new)-s])}}
}

func diffMessages(old []uint32, oldMsgs []Span, new []uint32, newMsgs []Span) []Edit {
	var edits []Edit
	po, pn := 0, 0 // ends of the last aligned pair
	for _, a := range alignMessages(old, oldMsgs, new, newMsgs) {
		om, nm := oldMsgs[a[0]], newMsgs[a[1]]
		if om.Start < po || nm.Start < pn {
			continue // spans that overlap an earlier aligned pair
		}
		if e, ok := gapEdit(old, po, om.Start, new, pn, nm.Start); ok {
			edits = append(edits, e)
		}
		po, pn = om.End, nm.End
	}
	// After the last aligned pair nothing downstream is kept: truncate old
	// where new stops matching it.
	if c := CommonPrefix(old[po:], new[pn:]); po+c < len(old) {
		edits = append(edits, Edit{Start: po + c, End: len(old)})
	}
	return edits
}

// gapEdit is the edit replacing old[os:oe] by new[ns:ne], trimmed to the
// tokens that differ; ok is false when they are equal.
func gapEdit(old []uint32, os, oe int, new []uint32, ns, ne int) (Edit, bool) {
	og, ng := old[os:oe], new[ns:ne]
	if slices.Equal(og, ng) {
		return Edit{}, false
	}
	p := CommonPrefix(og, ng)
	s := CommonSuffix(og[p:], ng[p:])
	return Edit{Start: os + p, End: oe - s, Replacement: slices.Clone(ng[p : len(ng)-s])}, true
}

// alignMessages returns index pairs of messages with equal tokens, in
// increasing order in both sequences, as many as possible (LCS).
func alignMessages(old []uint32, oldMsgs []Span, new []uint32, newMsgs []Span) [][2]int {
	seed := maphash.MakeSeed()
	key := func(toks []uint32) uint64 {
		var h maphash.Hash
		h.SetSeed(seed)
		for _, t := range toks {
			h.WriteByte(byte(t))
			h.WriteByte(byte(t >> 8))
			h.WriteByte(byte(t >> 16))
			h.WriteByte(byte(t >> 24))
		}
		return h.Sum64()
	}
	ok := make([]uint64, len(oldMsgs))
	for i, m := range oldMsgs {
		ok[i] = key(old[m.Start:m.End])
	}
	nk := make([]uint64, len(newMsgs))
	for i, m := range newMsgs {
		nk[i] = key(new[m.Start:m.End])
	}
	eq := func(i, j int) bool {
		return ok[i] == nk[j] && slices.Equal(old[oldMsgs[i].Start:oldMsgs[i].End], new[newMsgs[j].Start:newMsgs[j].End])
	}
	n, m := len(oldMsgs), len(newMsgs)
	// lcs[i][j]: LCS length of oldMsgs[i:] and newMsgs[j:].
	lcs := make([]int32, (n+1)*(m+1))
	at := func(i, j int) *int32 { return &lcs[i*(m+1)+j] }
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if eq(i, j) {
				*at(i, j) = *at(i+1, j+1) + 1
			} else {
				*at(i, j) = max(*at(i+1, j), *at(i, j+1))
			}
		}
	}
	var pairs [][2]int
	for i, j := 0, 0; i < n && j < m; {
		switch {
		case eq(i, j):
			pairs = append(pairs, [2]int{i, j})
			i, j = i+1, j+1
		case *at(i+1, j) >= *at(i, j+1):
			i++
		default:
			j++
		}
	}
	return pairs
}

func validSpans(spans []Span, n int) bool {
	end := 0
	for _, s := range spans {
		if s.Start < end || s.End <= s.Start || s.End > n {
			return false
		}
		end = s.End
	}
	return true
}

// CommonPrefix is the length of the longest common prefix of a and b.
func CommonPrefix(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// CommonSuffix is the length of the longest common suffix of a and b.
func CommonSuffix(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := 1; i <= n; i++ {
		if a[len(a)-i] != b[len(b)-i] {
			return i - 1
		}
	}
	return n
}

// AutoSplice is session diff with auto_splice on: it diffs the session's
// cached sequence (with oldMsgs, the spans of its last request's messages,
// when known) against the new request's tokens and splices when that keeps
// cached tokens. It reports whether it spliced. The engine service calls it
// before Match, without the index lock; it waits for the fills.
func (s *Splicer) AutoSplice(ctx context.Context, id string, oldMsgs []Span, tokens []uint32, msgs []Span) (Result, bool, error) {
	sess, ok := s.cfg.Sessions.Session(id)
	if !ok || sess.Cached < s.cfg.Index.PageSize() {
		return Result{}, false, nil
	}
	edits := Diff(sess.Tokens, oldMsgs, tokens, msgs)
	if !Worth(edits, min(sess.Cached, len(sess.Tokens)), s.cfg.SinkTokens) {
		return Result{}, false, nil
	}
	res, err := s.Splice(ctx, id, edits)
	return res, err == nil, err
}
