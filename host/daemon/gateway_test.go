package daemon

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
)

// The front door's view of the host (gatewayEngine): a session's pages
// that eviction took off the device tier (write-through keeps them on the
// host tier, as a connector's staging does) are counted as not staged,
// and Stage loads them back, bytes intact, so a splice can move them.
func TestGatewayEngineStagesEvictedPages(t *testing.T) {
	d, stop := start(t, modelConfig(t)) // 8 device pages of 4 tokens
	defer stop()
	g := gatewayEngine{d}
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	h, pages := commitPages(t, d, "acme", toks)
	if n := g.StagedPages("acme", toks); n != 3 {
		t.Fatalf("%d pages staged after the commit, want 3", n)
	}
	waitFor(t, "write-through to host", func() bool {
		p, _ := pageInfo(d, "acme", h.Sequence[2])
		return p.Tiers.Has(tier.Host)
	})
	// Five newer pages fill the device tier past its high watermark: the
	// step loop evicts the least recently used leaves, the session's.
	commitPages(t, d, "acme", []uint32{21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40})
	waitFor(t, "the session's last page off the device", func() bool { return g.StagedPages("acme", toks) < 3 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Stage(ctx, "acme", toks); err != nil {
		t.Fatal(err)
	}
	// The device tier is full again: the step loop evicts, and not the
	// pages just staged (Stage marked them used).
	dev := d.core.pools.Memory(tier.Device)
	waitFor(t, "eviction below the high watermark", func() bool { return dev.Stats().Used < 7 })
	if n := g.StagedPages("acme", toks); n != 3 {
		t.Fatalf("%d pages staged after Stage and an eviction, want 3", n)
	}
	for i, seq := range h.Sequence {
		p, _ := pageInfo(d, "acme", seq)
		got := make([]byte, len(pages[i]))
		if err := dev.ReadPage(pool.Slot(p.Loc[tier.Device]), got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pages[i]) {
			t.Fatalf("page %d came back with other bytes", i)
		}
	}
	// Tokens past what the index holds are not asked for.
	if err := g.Stage(ctx, "acme", append(toks, 50, 51, 52, 53)); err != nil {
		t.Fatalf("staging a sequence the host holds only a prefix of: %v", err)
	}
}
