package splice

import "slices"

// growAnchor is how many of old's last tokens DiffGrown looks for in new;
// maxAnchorHits bounds the places it tries (a template's repeated role
// header can recur in every turn).
const (
	growAnchor    = 8
	maxAnchorHits = 256
)

// DiffGrown derives the one edit that turns a session's cached sequence
// old into a prefix of its next request new when no message spans are
// known (an engine that sends only tokens, like vLLM's connector): new is
// old edited once and then grown by a turn. The edit starts where the two
// first differ and ends where the longest tail of old reappears in new;
// what lies between in new is its replacement. Several edits of one turn
// become one edit over the span that covers them. ok is false when new
// extends old, or when old's last tokens are nowhere in new after the
// common prefix (nothing downstream can be kept).
func DiffGrown(old, new []uint32) (e Edit, ok bool) {
	a := CommonPrefix(old, new)
	if len(old)-a <= growAnchor {
		return Edit{}, false
	}
	tail := old[len(old)-growAnchor:]
	bestEnd, bestDelta := -1, 0
	hits := 0
	for p := a; p+growAnchor <= len(new) && hits < maxAnchorHits; p++ {
		if new[p] != tail[0] || !slices.Equal(new[p:p+growAnchor], tail) {
			continue
		}
		hits++
		delta := p - (len(old) - growAnchor)
		end := len(old) - growAnchor
		for end > a && end+delta > a && old[end-1] == new[end-1+delta] {
			end--
		}
		if bestEnd < 0 || end < bestEnd {
			bestEnd, bestDelta = end, delta
		}
	}
	if bestEnd < 0 {
		return Edit{}, false
	}
	f := bestEnd + bestDelta
	if bestEnd == a && f == a {
		return Edit{}, false
	}
	return Edit{Start: a, End: bestEnd, Replacement: slices.Clone(new[a:f])}, true
}
