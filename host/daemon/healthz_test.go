package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
)

// Before any engine registered, /healthz says so instead of "ok", and Stats
// counts the sessions the engine service remembers (it read 0 always).
func TestHealthzAndStatsSeeTheEngine(t *testing.T) {
	c := modelConfig(t)
	c.HTTP.Listen = "127.0.0.1:0"
	d := startWithEngine(t, c)
	health := func() (int, health) {
		t.Helper()
		code, body := get(t, "http://"+d.HTTPAddr()+"/healthz")
		var h health
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("healthz body %s: %v", body, err)
		}
		return code, h
	}
	if code, h := health(); code != http.StatusOK || h.Status != "waiting" || !strings.HasPrefix(h.Checks["engine"], "not registered") {
		t.Fatalf("before an engine registered: %d %+v", code, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctl, err := controlclient.DialUnix(d.ControlSocket(), controlclient.UnixOptions{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if st, err := ctl.Stats(ctx); err != nil || st.Sessions != 0 {
		t.Fatalf("stats before any request: %+v %v", st, err)
	}

	cl, err := engineclient.Dial(ctx, engineclient.Options{Socket: c.EngineSocket(), EngineID: "test", Layout: tinyLayout(), Rope: engineclient.RopeConfig{Base: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	engineTurn(t, cl, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, "")
	if code, h := health(); code != http.StatusOK || h.Status != "ok" || h.Checks["engine"] != "ok" {
		t.Fatalf("after an engine registered: %d %+v", code, h)
	}
	if st, err := ctl.Stats(ctx); err != nil || st.Sessions != 1 {
		t.Fatalf("stats after one session's request: sessions %d, %v", st.Sessions, err)
	}
}
