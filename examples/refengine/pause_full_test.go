package refengine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// The operator's setup: a disk tier of 32 pages and 12 sessions paused to
// it. Pauses past what the tier can take are refused at once with
// capacity_exhausted naming the tier (they answered ok and then failed in
// the background), the granted leases settle, and the engine keeps being
// served with new sessions well past the device's size.
func TestFullPauseTierNeverStallsTheEngine(t *testing.T) {
	c := restartConfig(t.TempDir())
	c.Tiers.Device.CapacityPages = 64
	c.Tiers.Host.CapacityPages = 64
	c.Tiers.Disk.CapacityPages = 32
	d, _ := runDaemon(t, c)
	e := newEngine(t, c.EngineSocket(), refengine.GQA(hostPage))
	ctl := controlFor(t, c)
	g := &tokens{next: 7}
	const pages = 7
	granted, refused := 0, 0
	for i := range 12 {
		toks := g.take(pages * hostPage)
		if _, err := e.Turn(ctxT(t), fmt.Sprint("s", i), "", toks); err != nil {
			t.Fatal(err)
		}
		r, err := ctl.Apply(ctxT(t), directive.Turn{Directives: []directive.Directive{
			directive.Pause{BlockHashes: hashesOf(toks, ""), TTL: directive.TTLOf(time.Hour), LeaseID: fmt.Sprint("L", i)}}})
		switch {
		case err != nil:
			t.Fatal(err)
		case r.OK():
			granted++
			waitOnDisk(t, d, toks)
		case r.Error.Code == errcode.CapacityExhausted && strings.Contains(r.Error.Error(), "tier disk"):
			refused++
		default:
			t.Fatalf("pause %d: %+v", i, r)
		}
	}
	if granted != 32/pages || refused != 12-granted {
		t.Fatalf("%d pauses granted, %d refused; want %d and %d", granted, refused, 32/pages, 12-granted)
	}
	// The device (64 pages) is not held by leases: 20 more sessions of 7
	// pages are served, each a full prefill then a full hit.
	for i := range 20 {
		toks := g.take(pages * hostPage)
		for turn := range 2 {
			st, err := e.Turn(ctxT(t), fmt.Sprint("n", i), "", toks)
			if err != nil {
				t.Fatalf("new session %d, turn %d: %v", i, turn, err)
			}
			if turn == 1 && st.Cached != len(toks) {
				t.Fatalf("new session %d: second turn cached %d of %d", i, st.Cached, len(toks))
			}
		}
	}
	st, err := ctl.Stats(ctxT(t))
	if err != nil || st.Leases != int64(granted) || len(st.DegradedLeases) != 0 {
		t.Fatalf("stats: %d leases (want %d), degraded %+v, %v", st.Leases, granted, st.DegradedLeases, err)
	}
}
