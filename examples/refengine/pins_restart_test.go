package refengine_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Every acknowledged pin whose pages were committed survives the host's
// end, clean (SIGTERM) or not (SIGKILL): the pinned pages are written
// through to the disk tier, so after the restart `ctl stats` shows the pins
// before any engine registered, and each pinned prefix is a cache hit again
// with every row passing the reference engine's contract check. The
// operator's host got 1 of 4 pins back after SIGKILL, and dropped a
// session pin at SIGTERM.
func TestAcknowledgedPinsSurviveRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		for _, configured := range []bool{false, true} {
			name := "pools-at-register"
			if configured {
				name = "configured-model"
			}
			t.Run(fmt.Sprintf("%s/%s", sig, name), func(t *testing.T) { pinsSurviveSignal(t, sig, configured) })
		}
	}
}

func pinsSurviveSignal(t *testing.T, sig syscall.Signal, configured bool) {
	c := restartConfig(t.TempDir())
	if configured {
		m := refengine.GQA(hostPage)
		c.Model = config.Model{Name: m.Name, Attention: "mha", DType: m.DType, Layers: m.Layers, KVHeads: m.KVHeads,
			HeadDim: m.HeadDim, RopeDim: m.RopeDim, RopeStyle: m.RopeStyle}
	}
	p := spawnDaemon(t, c)
	e := newEngine(t, c.EngineSocket(), refengine.GQA(hostPage))
	g := &tokens{next: 101}
	const sessions, pages = 5, 3
	var prompts [][]uint32
	for i := range sessions {
		toks := g.take(pages * hostPage)
		if _, err := e.Turn(ctxT(t), fmt.Sprint("s", i), "", toks); err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, toks)
	}
	ctl := controlFor(t, c)
	for _, toks := range prompts[:sessions-1] {
		h := hashesOf(toks, "")
		apply(t, ctl, directive.Cache{BlockHashes: h[len(h)-1:], Pin: true, TTL: directive.TTLOf(time.Hour)})
	}
	// The last one as `ctl pin --session s4 --end N --ttl 1h` pins it.
	apply(t, ctl, directive.Pin{Session: fmt.Sprint("s", sessions-1), End: pages * hostPage, TTL: directive.TTLOf(time.Hour)})
	// And a paused session, whose lease must show too.
	paused := g.take(pages * hostPage)
	if _, err := e.Turn(ctxT(t), "paused", "", paused); err != nil {
		t.Fatal(err)
	}
	apply(t, ctl, directive.Pause{BlockHashes: hashesOf(paused, ""), TTL: directive.TTLOf(time.Hour), LeaseID: "L"})
	want := int64(sessions * pages)
	waitStats(t, ctl, "every pinned and paused page on the disk tier", func(s controlclient.Stats) bool {
		for _, ts := range s.Tiers {
			if ts.Tier == "disk" {
				return ts.PinnedPages == want && ts.LeasedPages == pages
			}
		}
		return false
	})
	// No wait for a background save: each pin and the pause were saved
	// before their replies.
	_ = e.Close()
	_ = ctl.Close()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("host did not end within 20s of %v", sig)
	}

	spawnDaemon(t, c)
	ctl = controlFor(t, c)
	st, err := ctl.Stats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Pins != sessions || st.Leases != 1 || st.RestorePending == configured {
		t.Fatalf("stats after the restart, before an engine registered: %d pins (want %d), %d leases (want 1), restore pending %v",
			st.Pins, sessions, st.Leases, st.RestorePending)
	}
	e = newEngine(t, c.EngineSocket(), refengine.GQA(hostPage))
	for i, toks := range prompts {
		ts, err := e.Turn(ctxT(t), fmt.Sprint("s", i), "", toks)
		if err != nil {
			t.Fatalf("session %d after %v: %v", i, sig, err)
		}
		if ts.Cached != len(toks) || ts.LoadedPages != pages || ts.CheckedRows == 0 {
			t.Fatalf("pinned session %d after %v: cached %d of %d, %d pages loaded back, %d rows checked",
				i, sig, ts.Cached, len(toks), ts.LoadedPages, ts.CheckedRows)
		}
	}
	waitStats(t, ctl, "the pins restored", func(s controlclient.Stats) bool { return s.Pins == sessions && !s.RestorePending })
}

func waitStats(t *testing.T, ctl *controlclient.UnixClient, what string, ok func(controlclient.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := ctl.Stats(ctxT(t))
		if err == nil && ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %+v %v", what, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A pin is durable when its reply says ok: the host is killed (SIGKILL)
// the moment the reply arrives, with no wait for the background save, and
// after the restart the pin is there and its prefix is a cache hit again.
// Before, the pin record was saved up to 100 ms after the reply.
func TestPinSurvivesSIGKILLRightAfterItsReply(t *testing.T) {
	for _, verb := range []string{"cache", "pin-session", "pin_prefix"} {
		t.Run(verb, func(t *testing.T) {
			c := restartConfig(t.TempDir())
			c.Mover.StepInterval = time.Hour // only the pin's own reply may write anything through
			p := spawnDaemon(t, c)
			e := newEngine(t, c.EngineSocket(), refengine.GQA(hostPage))
			toks := (&tokens{next: 7001}).take(3 * hostPage)
			if _, err := e.Turn(ctxT(t), "s", "", toks); err != nil {
				t.Fatal(err)
			}
			ctl := controlFor(t, c)
			switch h := hashesOf(toks, ""); verb {
			case "cache":
				apply(t, ctl, directive.Cache{BlockHashes: h[len(h)-1:], Pin: true, TTL: directive.TTLOf(time.Hour)})
			case "pin-session":
				apply(t, ctl, directive.Pin{Session: "s", End: int64(len(toks)), TTL: directive.TTLOf(time.Hour)})
			default:
				r, err := ctl.CacheControl(ctxT(t), directive.CacheControl{Action: directive.ActionPinPrefix, TokenIDs: toks, TTL: directive.TTLOf(time.Hour)}, "")
				if err != nil || r.Status != directive.StatusOK {
					t.Fatalf("pin_prefix: %+v %v", r, err)
				}
			}
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-p.done
			_ = e.Close()

			spawnDaemon(t, c)
			ctl = controlFor(t, c)
			if st, err := ctl.Stats(ctxT(t)); err != nil || st.Pins != 1 {
				t.Fatalf("stats after SIGKILL right after the pin's reply: %d pins, %v", st.Pins, err)
			}
			e = newEngine(t, c.EngineSocket(), refengine.GQA(hostPage))
			ts, err := e.Turn(ctxT(t), "s", "", toks)
			if err != nil || ts.Cached != len(toks) || ts.CheckedRows == 0 {
				t.Fatalf("the pinned prefix after the restart: cached %d of %d, %d rows checked, %v", ts.Cached, len(toks), ts.CheckedRows, err)
			}
		})
	}
}
