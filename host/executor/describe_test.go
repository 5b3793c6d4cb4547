package executor

import "testing"

// The audit log's target names at most four blocks, then how many more.
func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		o    op
		want string
	}{
		{&unpinOp{pages: pages{hashes: []uint64{7}}}, "blocks 7"},
		{&pauseOp{pages: pages{hashes: []uint64{1, 2, 3, 4, 5, 6}}, lease: "l-1"}, "blocks 1,2,3,4 +2 more lease l-1"},
		{&renewOp{lease: "l-2"}, "lease l-2"},
		{&pinOp{pages: pages{tokens: make([]uint32, 3)}}, "3 tokens"},
		{&spliceOp{}, ""},
	} {
		if got := c.o.describe(); got != c.want {
			t.Errorf("describe %+v = %q, want %q", c.o, got, c.want)
		}
	}
}
