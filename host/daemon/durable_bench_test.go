package daemon

import (
	"context"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// BenchmarkDirectiveReply is the round trip of a directive on the Control
// socket of a host with pools and a disk tier: a pin and its unpin, each
// saved and fsynced before its reply, against a Think (marking a page
// transient, saved only in the background) in the same run. Report the
// ratio of pin to think.
func BenchmarkDirectiveReply(b *testing.B) {
	c := modelConfig(b)
	d, stop := start(b, c)
	defer stop()
	h, _ := commitPages(b, d, "", []uint32{1, 2, 3, 4, 5, 6, 7, 8})
	ctl, err := controlclient.DialUnix(d.ControlSocket(), controlclient.UnixOptions{Source: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer ctl.Close()
	last := []directive.Hash{directive.Hash(h.Sequence[len(h.Sequence)-1])}
	apply := func(ds ...directive.Directive) {
		r, err := ctl.Apply(context.Background(), directive.Turn{Directives: ds})
		if err != nil || !r.OK() {
			b.Fatalf("%+v %v", r, err)
		}
	}
	b.Run("pin+unpin", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			apply(directive.Cache{BlockHashes: last, Pin: true})
			apply(directive.Cache{BlockHashes: last, Pin: false})
		}
	})
	b.Run("think+think", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			apply(directive.Think{BlockHashes: last, Transient: true})
			apply(directive.Think{BlockHashes: last, Transient: true})
		}
	})
}
