package daemon

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/config"
)

// testConfig is a host on ephemeral ports with its own data dir.
func testConfig(t testing.TB) config.Config {
	c := config.Default()
	c.DataDir = t.TempDir()
	c.HTTP.Listen = "127.0.0.1:0"
	c.NATS.Listen = ""
	return c
}

func start(t testing.TB, c config.Config) (*Daemon, func()) {
	t.Helper()
	d, err := New(c, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return d, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("host did not stop within 10s")
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	var resp *http.Response
	var err error
	for i := 0; i < 50; i++ { // the server goroutine may not be serving yet
		if resp, err = http.Get(url); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHealthAndMetrics(t *testing.T) {
	d, stop := start(t, testConfig(t))
	defer stop()
	code, body := get(t, "http://"+d.HTTPAddr()+"/healthz")
	if code != 200 {
		t.Fatalf("healthz %d: %s", code, body)
	}
	var h health
	if err := json.Unmarshal([]byte(body), &h); err != nil || h.Status != "waiting" || h.Checks["nats"] != "ok" {
		t.Fatalf("healthz body %s (%v)", body, err)
	}
	_, metrics := get(t, "http://"+d.HTTPAddr()+"/metrics")
	for _, want := range []string{`kvpilot_blocks{tier="device"} 0`, `kvpilot_tier_capacity_blocks{tier="device"} 4096`, "kvpilot_leases 0", "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestUnhealthyCheckIs503(t *testing.T) {
	d, stop := start(t, testConfig(t))
	defer stop()
	d.AddCheck("disk", func() error { return io.ErrUnexpectedEOF })
	code, body := get(t, "http://"+d.HTTPAddr()+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "unexpected EOF") {
		t.Fatalf("got %d %s", code, body)
	}
}

func TestBusyHTTPAddressNamesTheKey(t *testing.T) {
	d, stop := start(t, testConfig(t))
	defer stop()
	c := testConfig(t)
	c.HTTP.Listen = d.HTTPAddr()
	if _, err := New(c, hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "http.listen") {
		t.Fatalf("second host on a busy address: %v", err)
	}
}
