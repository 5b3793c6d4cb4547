package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/chat"
)

// The session table forgets the least recently used sessions once they
// hold more than its byte budget, whatever their count, and keeps its
// byte count exact as sessions change and leave.
func TestSessionsBoundedByBytes(t *testing.T) {
	ss := newSessions(1000, 4, nil)
	ss.maxBytes = 64 << 10
	toks := make([]uint32, 2048) // 8 KiB of tokens a session
	for i := range 40 {
		ss.commit(fmt.Sprint("s", i), "", toks, 0, nil)
		ss.touch(fmt.Sprint("s", i), "", []chat.Message{{Role: "user", Content: strings.Repeat("x", 1024)}})
		if ss.bytes > ss.maxBytes {
			t.Fatalf("after %d sessions they hold %d bytes, over the %d budget", i+1, ss.bytes, ss.maxBytes)
		}
	}
	if n := ss.lru.Len(); n < 4 || n > 8 {
		t.Fatalf("%d sessions kept within 64 KiB of ~9 KiB sessions", n)
	}
	if ss.get("s39", false) == nil || ss.get("s0", false) != nil {
		t.Fatal("the most recent session was dropped or the oldest kept")
	}
	var sum int64
	for e := ss.lru.Front(); e != nil; e = e.Next() {
		sum += e.Value.(*sessionState).weight
	}
	if sum != ss.bytes {
		t.Fatalf("byte count %d, sessions hold %d", ss.bytes, sum)
	}
	// One session over the whole budget is kept (it is the one in use).
	ss.commit("huge", "", make([]uint32, 64<<10), 0, nil)
	if ss.get("huge", false) == nil || ss.lru.Len() != 1 {
		t.Fatalf("%d sessions after a huge one", ss.lru.Len())
	}
}
