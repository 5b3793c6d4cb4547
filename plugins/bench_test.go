package plugins

import (
	"context"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy/pluginwire"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// BenchmarkRoundTrip measures one observation -> directive round trip
// through a plugin process (gRPC over go-plugin's AutoMTLS connection),
// reporting p50 and p99.
func BenchmarkRoundTrip(b *testing.B) {
	r, err := New(Options{BuiltinArgs: func(n string) []string { return []string{"policy", n} }, Executable: exe(b)})
	if err != nil {
		b.Fatal(err)
	}
	p, err := r.launch(context.Background(), config.Policy{Name: "echo", Builtin: "echo"})
	if err != nil {
		b.Fatal(err)
	}
	defer p.client.Kill()
	po, _ := pluginwire.ToProto(request("s", 0))
	obs := []*pb.Observation{po}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		rs, err := p.rpc.Observe(context.Background(), obs)
		if err != nil || len(rs[0].Directives) != 1 {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkThroughput measures observations per second one plugin
// sustains through the runtime (queue, batching, sink), end to end.
func BenchmarkThroughput(b *testing.B) {
	var turns atomic.Int64
	sink := SinkFunc(func(context.Context, directive.Turn) error { turns.Add(1); return nil })
	r, err := New(Options{Executable: exe(b), Sink: sink, QueueSize: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Swap(context.Background(), []config.Policy{{Name: "echo", Builtin: "echo"}}); err != nil {
		b.Fatal(err)
	}
	obs := request("s", 0)
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		for r.Stats()["echo"].Pending > 1<<15 {
			time.Sleep(100 * time.Microsecond) // stay below the queue bound: measure delivery, not drops
		}
		if err := r.Observe(obs); err != nil {
			b.Fatal(err)
		}
	}
	if err := r.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	el := time.Since(t0)
	b.StopTimer()
	st := r.Stats()["echo"]
	if st.DroppedTotal() != 0 || int(turns.Load()) != b.N {
		b.Fatalf("stats %+v, turns %d of %d", st, turns.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "obs/s")
}

func exe(b *testing.B) string {
	e, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	return e
}
