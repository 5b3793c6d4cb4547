package executor

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// FuzzApplyJSON feeds arbitrary turns to an executor over a real index
// holding a few pages, and holds: no panic; every refusal is a registry
// error; a refused turn leaves the index's counts as they were; and the
// index's invariants hold after every turn.
func FuzzApplyJSON(f *testing.F) {
	f.Add([]byte(`{"type": "Cache", "block_hashes": [111, 222, 333], "pin": true}`))
	f.Add([]byte(`[{"type":"Cache","block_hashes":[SEQ1],"pin":true},{"type":"Think","block_hashes":[SEQ1],"transient":true},{"type":"Cache","block_hashes":[SEQ2],"pin":true}]`))
	f.Add([]byte(`[{"type":"Pause","block_hashes":[SEQ1],"ttl_seconds":60,"lease_id":"L"},{"type":"RevokeLease","lease_id":"L"}]`))
	f.Add([]byte(`[{"type":"Prune","after_block_hash":SEQ0},{"type":"Warm","block_keys":["SEQ1"],"target_tier":"host"}]`))
	f.Add([]byte(`[{"type":"Cache","block_hashes":[SEQ1],"pin":true},{"type":"Splice","session":"s","start":4,"end":8,"replacement":"x"}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := newEnv(t)
		a := e.commit("", toks(0, 16))
		b := e.commit("", toks(100, 28))
		data = replaceSeqs(data, a.Sequence[0], a.Sequence[1], b.Sequence[6])
		before := e.ix.Stats()
		r := e.ex.ApplyJSON(context.Background(), "fuzz", "", data)
		if err := e.ix.Check(); err != nil {
			t.Fatalf("invariants: %v", err)
		}
		if r.OK() {
			return
		}
		if r.Error == nil {
			t.Fatal("refused without an error")
		}
		if _, ok := errcode.Lookup(r.Error.Code); !ok {
			t.Fatalf("unregistered code %q", r.Error.Code)
		}
		if r.Error.Code == errcode.Internal {
			t.Fatalf("internal error: %v", r.Error)
		}
		after := e.ix.Stats()
		if after.Pages != before.Pages || after.PinnedPages != before.PinnedPages || after.Leases != before.Leases || after.InFlight != before.InFlight {
			t.Fatalf("refused turn changed the index: %+v -> %+v", before, after)
		}
	})
}

// replaceSeqs lets corpus entries name the fixture's pages.
func replaceSeqs(data []byte, seqs ...uint64) []byte {
	s := string(data)
	for i, q := range seqs {
		s = strings.ReplaceAll(s, fmt.Sprintf("SEQ%d", i), fmt.Sprint(q))
	}
	return []byte(s)
}
