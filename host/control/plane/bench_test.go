package plane

import (
	"context"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// The round trip of a one-directive turn (pin, then unpin, one cached
// block) through each transport into the executor and back. `kvpilot bench
// control` reports the same with percentiles and baselines.
func benchmarkApply(b *testing.B, pick func(e *env) controlclient.Client) {
	e := newEnv(b)
	seq := e.commit("", toks(0, 4)).Sequence[0]
	c := pick(e)
	turns := [2]directive.Turn{
		{Directives: []directive.Directive{directive.Cache{BlockHashes: hs(seq), Pin: true}}},
		{Directives: []directive.Directive{directive.Cache{BlockHashes: hs(seq), Pin: false}}},
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := c.Apply(ctx, turns[i&1])
		if err != nil || !r.OK() {
			b.Fatalf("%+v %v", r, err)
		}
	}
}

func BenchmarkApplyUnixSocket(b *testing.B) {
	benchmarkApply(b, func(e *env) controlclient.Client { return e.uds })
}

func BenchmarkApplyNATS(b *testing.B) {
	benchmarkApply(b, func(e *env) controlclient.Client { return e.nc })
}
