package executor

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

// BenchmarkApplyPinUnpin is one directive round trip through the executor
// without a transport: check, apply, audit to a ring. Each iteration is two
// turns (pin, then unpin) so the index stays the same.
func BenchmarkApplyPinUnpin(b *testing.B) {
	e := newEnv(b)
	a := e.commit("", toks(0, 16))
	ctx := context.Background()
	pin := directive.Turn{Source: "bench", Directives: []directive.Directive{directive.Cache{BlockHashes: hs(a.Sequence[3]), Pin: true}}}
	unpin := directive.Turn{Source: "bench", Directives: []directive.Directive{directive.Cache{BlockHashes: hs(a.Sequence[3])}}}
	b.ReportAllocs()
	for b.Loop() {
		if r := e.ex.Apply(ctx, pin); !r.OK() {
			b.Fatal(r.Error)
		}
		if r := e.ex.Apply(ctx, unpin); !r.OK() {
			b.Fatal(r.Error)
		}
	}
}

// BenchmarkCacheControlJSON is the router path: decode, apply, reply.
func BenchmarkCacheControlJSON(b *testing.B) {
	e := newEnv(b)
	a := e.commit("", toks(0, 16))
	ctx := context.Background()
	pin := []byte(fmt.Sprintf(`{"action":"pin_blocks","block_hashes":[%d],"worker_id":42}`, a.Sequence[3]))
	unpin := []byte(fmt.Sprintf(`{"action":"unpin_blocks","block_hashes":[%d],"worker_id":42}`, a.Sequence[3]))
	b.ReportAllocs()
	for b.Loop() {
		if r := e.ex.CacheControlJSON(ctx, "bench", "", pin); r.Status != "ok" {
			b.Fatal(r.Message)
		}
		if r := e.ex.CacheControlJSON(ctx, "bench", "", unpin); r.Status != "ok" {
			b.Fatal(r.Message)
		}
	}
}
