package daemon

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// An engine that cannot do what splice.recompute and splice.max_kl ask is
// refused at registration, for the host's settings and every tenant's.
func TestCheckRecompute(t *testing.T) {
	first, kl := 64, 0.005
	share := 0.2
	for _, tc := range []struct {
		name       string
		splice     config.Splice
		gateway    bool
		mode       engine.Mode
		recomputes bool
		ok         bool
	}{
		{"nothing asked", config.Splice{}, false, engine.ModeArena, false, true},
		{"arena engine that recomputes", config.Splice{MaxKL: &kl}, false, engine.ModeArena, true, true},
		{"arena engine that cannot", config.Splice{Recompute: config.Recompute{First: &first}}, false, engine.ModeArena, false, false},
		{"a tenant asks", config.Splice{Tenants: map[string]config.SpliceTenant{"acme": {Recompute: config.Recompute{Share: &share}}}},
			false, engine.ModeArena, false, false},
		{"connector, first, front door on", config.Splice{Recompute: config.Recompute{First: &first}}, true, engine.ModeConnector, false, true},
		{"connector, first, no front door", config.Splice{Tenants: map[string]config.SpliceTenant{"acme": {Recompute: config.Recompute{First: &first}}}},
			false, engine.ModeConnector, false, false},
		{"connector, guard", config.Splice{MaxKL: &kl}, true, engine.ModeConnector, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Daemon{cfg: config.Default()}
			d.cfg.Splice = tc.splice
			if tc.gateway {
				d.cfg.Gateway.Listen = "127.0.0.1:0"
			}
			err := d.checkRecompute(tc.mode, tc.recomputes)
			if (err == nil) != tc.ok {
				t.Fatalf("got %v, want ok=%v", err, tc.ok)
			}
			if e, isErr := errcode.As(err); err != nil && (!isErr || e.Code != errcode.RecomputeUnsupported) {
				t.Fatalf("%v is not recompute_unsupported", err)
			}
		})
	}
}
