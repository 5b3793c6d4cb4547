package engine

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/sdk/chat"
)

func toks(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// commitSession records a commit of tokens for a session as Commit does,
// with the page hashes of its full pages.
func commitSession(ss *sessions, id, tenant string, tokens []uint32) []uint64 {
	full := len(tokens) / ss.pageSize * ss.pageSize
	h := blockid.Compute(tokens[:full], ss.pageSize, blockid.Salt{Namespace: tenant}).Sequence
	ss.commit(id, tenant, tokens, full, h)
	return h
}

// Leaves and Through come from the hashes stored at commit (and recomputed
// after a splice), per tenant, without rehashing the other sessions.
func TestSpliceSessionsLeavesAndThrough(t *testing.T) {
	s := &Service{sessions: newSessions(16, 4, nil)}
	a := s.SpliceSessions()
	shared := toks(0, 8)
	ha := commitSession(s.sessions, "a", "acme", append(slices.Clone(shared), toks(100, 9)...))
	hb := commitSession(s.sessions, "b", "acme", append(slices.Clone(shared), toks(200, 8)...))
	commitSession(s.sessions, "c", "other", toks(0, 16))
	s.sessions.touch("matched-only", "acme", nil) // no commit: no leaf

	leaves := a.Leaves("acme", "a")
	if !slices.Equal(leaves, []uint64{hb[len(hb)-1]}) {
		t.Fatalf("leaves of acme except a = %v, want b's leaf %d", leaves, hb[len(hb)-1])
	}
	if got := a.Leaves("acme", ""); len(got) != 2 {
		t.Fatalf("leaves of acme = %v, want a's and b's", got)
	}
	var ids []string
	for _, x := range a.Through("acme", ha[1]) { // the shared second page
		ids = append(ids, x.ID)
	}
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("sessions through the shared page: %v", ids)
	}
	if got := a.Through("acme", ha[3]); len(got) != 1 || got[0].ID != "a" || got[0].Cached != 16 {
		t.Fatalf("sessions through a's own page: %+v", got)
	}
	if got := a.Through("other", ha[1]); len(got) != 0 {
		t.Fatalf("another tenant's sessions: %+v", got)
	}

	// A splice (as the splicer records it) moves the leaf to the new branch.
	edited := append(append(slices.Clone(shared), toks(900, 2)...), toks(104, 5)...)
	a.SetSession(spliceSession("a", "acme", edited, 12))
	want := blockid.Compute(edited[:12], 4, blockid.Salt{Namespace: "acme"}).Sequence
	if got := a.Leaves("acme", "b"); !slices.Equal(got, want[len(want)-1:]) {
		t.Fatalf("leaf after the splice %v, want %v", got, want[len(want)-1:])
	}
	if got, ok := a.Session("a"); !ok || !slices.Equal(got.Tokens, edited) || got.Cached != 12 {
		t.Fatalf("session after the splice: %+v %v", got, ok)
	}
	// A session moving to another tenant leaves the first one's index.
	commitSession(s.sessions, "b", "other", toks(0, 8))
	if got := a.Leaves("acme", ""); len(got) != 1 {
		t.Fatalf("leaves of acme after b moved: %v", got)
	}
}

// Edited ranges follow the session's positions across splices and mark
// the messages they touch.
func TestEditedSpansFollowSplices(t *testing.T) {
	ss := newSessions(4, 4, nil)
	base := toks(0, 40)
	commitSession(ss, "s", "", base)
	// Replace [8, 12) by 2 tokens: Δ = -2.
	e1 := append(append(slices.Clone(base[:8]), 500, 501), base[12:]...)
	ss.splice("s", "", e1, 36, blockid.Salt{Namespace: ""})
	// Replace [20, 30) of e1 (old positions 22..32) by nothing.
	e2 := append(slices.Clone(e1[:20]), e1[30:]...)
	ss.splice("s", "", e2, 28, blockid.Salt{Namespace: ""})
	got := ss.get("s", false).Edited
	if want := []Span{{8, 10}, {20, 20}}; !slices.Equal(got, want) {
		t.Fatalf("edited %v, want %v", got, want)
	}
	// A later edit before both moves them by its Δ.
	e3 := append(append(slices.Clone(e2[:4]), 700, 701, 702), e2[5:]...) // [4,5) → 3 tokens: Δ = +2
	ss.splice("s", "", e3, 28, blockid.Salt{Namespace: ""})
	if got, want := ss.get("s", false).Edited, []Span{{4, 7}, {10, 12}, {22, 22}}; !slices.Equal(got, want) {
		t.Fatalf("edited after a third splice %v, want %v", got, want)
	}
	msgs := []chat.Message{{Span: chat.Span{Start: 0, End: 4}}, {Span: chat.Span{Start: 5, End: 9}}, {Span: chat.Span{Start: 12, End: 22}},
		{Span: chat.Span{Start: 22, End: 26}}, {Span: chat.Span{Start: 26, End: 30}}}
	markEdited(msgs, ss.get("s", false).Edited)
	var flags []bool
	for _, m := range msgs {
		flags = append(flags, m.Edited)
	}
	if want := []bool{false, true, false, true, false}; !slices.Equal(flags, want) {
		t.Fatalf("edited flags %v, want %v", flags, want)
	}
	// A commit of a sequence that leaves the spliced one before an edit
	// forgets the edits from there on.
	commitSession(ss, "s", "", append(slices.Clone(e3[:11]), toks(9000, 20)...))
	if got, want := ss.get("s", false).Edited, []Span{{4, 7}}; !slices.Equal(got, want) {
		t.Fatalf("edited after a diverging commit %v, want %v", got, want)
	}
}

func TestReasoningPages(t *testing.T) {
	hs := []uint64{10, 11, 12, 13, 14, 15}
	for _, c := range []struct {
		prompt, reasoning int
		want              []uint64
	}{
		{prompt: 8, reasoning: 0, want: nil},
		{prompt: 8, reasoning: 8, want: []uint64{12, 13}},   // pages 2 and 3 are all reasoning
		{prompt: 9, reasoning: 10, want: []uint64{13}},      // page 2 starts in the prompt; page 4 ends after the reasoning
		{prompt: 16, reasoning: 40, want: []uint64{14, 15}}, // past the committed pages
	} {
		if got := reasoningPages(hs, 4, c.prompt, c.reasoning); !slices.Equal(got, c.want) {
			t.Errorf("prompt %d reasoning %d: %v, want %v", c.prompt, c.reasoning, got, c.want)
		}
	}
}

func spliceSession(id, tenant string, tokens []uint32, cached int) splice.Session {
	return splice.Session{ID: id, Tenant: tenant, Tokens: tokens, Cached: cached}
}

// BenchmarkSpliceSessions measures what a splice's snapshot costs the
// service with many sessions of one tenant: Leaves reads stored leaf
// hashes, Through scans stored page hashes; neither rehashes tokens.
func BenchmarkSpliceSessions(b *testing.B) {
	const sessionsN, tokensN = 10000, 4096
	s := &Service{sessions: newSessions(sessionsN, 16, nil)}
	for i := 0; i < sessionsN; i++ {
		commitSession(s.sessions, "s"+string(rune('a'+i%26))+itoa(i), "acme", toks(i*7, tokensN))
	}
	a := s.SpliceSessions()
	b.Run("Leaves", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(a.Leaves("acme", "sa0")) != sessionsN-1 {
				b.Fatal("wrong leaves")
			}
		}
	})
	b.Run("Through", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = a.Through("acme", 42)
		}
	})
}

func itoa(i int) string { return fmt.Sprint(i) }
