package plane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/host/uds"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

func TestRateLimitPerSource(t *testing.T) {
	e := newLimitedEnv(t, map[ingress.Door]ingress.RateLimit{ingress.NATS: {PerSecond: 0.01, Burst: 2, Key: "nats.rate_limit"}})
	h := e.commit("", toks(0, 4)).Sequence
	client := func(source string) *controlclient.NATSClient {
		c, err := controlclient.NewNATS(e.nc.Conn(), controlclient.NATSOptions{Subject: "kv-control-42", Source: source})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := client("router-a"), client("router-b")
	pin := directive.Cache{BlockHashes: hs(h[0]), Pin: true}
	ok(t, apply(t, a, "", pin))
	ok(t, apply(t, a, "", pin))
	before := e.snapshot("", h...)
	r := apply(t, a, "", pin)
	refused(t, r, -1, errcode.RateLimited)
	if !strings.Contains(r.Error.Detail, "nats:router-a") {
		t.Fatalf("rate limit detail %q does not name the source", r.Error.Detail)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc, err := a.CacheControl(ctx, directive.CacheControl{Action: directive.ActionPinBlocks, BlockHashes: hs(h[0])}, "")
	if err != nil || cc.Code != errcode.RateLimited || cc.Status != directive.StatusError {
		t.Fatalf("cache_control over the limit: %+v %v", cc, err)
	}
	if got := e.snapshot("", h...); got != before {
		t.Fatal("a rate-limited command changed the index")
	}
	ok(t, apply(t, b, "", pin)) // another source has its own bucket
	if got := gather(t, e)[`kvpilot_rate_limited_total{transport="nats"}`]; got != 2 {
		t.Fatalf("kvpilot_rate_limited_total{transport=nats} = %v, want 2 (a turn and a cache_control)", got)
	}
}

func TestMetricsCountDirectives(t *testing.T) {
	e := newEnv(t)
	h := e.commit("", toks(0, 4)).Sequence
	ok(t, apply(t, e.uds, "", directive.Cache{BlockHashes: hs(h[0]), Pin: true}))
	ok(t, apply(t, e.nc, "", directive.Cache{BlockHashes: hs(h[0]), Pin: true}))
	refused(t, apply(t, e.uds, "", directive.Cache{BlockHashes: hs(999), Pin: true}), 0, errcode.UnknownBlock)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Both transports, and both kinds of request: one verb spelling, the
	// SDK's wire name (the directive's type, the cache_control action).
	for _, c := range []controlclient.Client{e.nc, e.uds} {
		if _, err := c.CacheControl(ctx, directive.CacheControl{Action: directive.ActionUnpinBlocks, BlockHashes: hs(h[0])}, ""); err != nil {
			t.Fatal(err)
		}
	}
	got := gather(t, e)
	for key, want := range map[string]float64{
		`kvpilot_directives_total{result="ok",verb="Cache"}`:            2,
		`kvpilot_directives_total{result="unknown_block",verb="Cache"}`: 1,
		`kvpilot_directives_total{result="ok",verb="unpin_blocks"}`:     2,
		`kvpilot_pin_rejections_total{reason="unknown"}`:                1,
		`kvpilot_directive_duration_seconds{verb="Cache"}`:              3,
		`kvpilot_directive_duration_seconds{verb="unpin_blocks"}`:       2,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	for key := range got {
		if strings.Contains(key, `verb="cache"`) || strings.Contains(key, `verb="unpin-blocks"`) {
			t.Errorf("%s: a verb spelled otherwise than on the wire", key)
		}
	}
}

// gather reads the host's registry: a counter's value or a histogram's
// sample count, by name and labels.
func gather(t *testing.T, e *env) map[string]float64 {
	t.Helper()
	mfs, err := e.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + labels(m)
			switch {
			case m.GetCounter() != nil:
				got[key] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				got[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return got
}

func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// helperEnv, when set, makes the test binary a Control client that calls
// Stats on the socket it names and prints the outcome (see TestMain).
const helperEnv = "KVPILOT_TEST_CONTROL_CLIENT"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		c, err := controlclient.DialUnix(path, controlclient.UnixOptions{})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err = c.Stats(ctx)
			cancel()
		}
		if err != nil {
			fmt.Println("refused:", err)
			os.Exit(0)
		}
		fmt.Println("served")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A peer whose uid is not on the allow-list is refused by the socket
// before gRPC sees it; once allowed, the same peer is served. The peer is
// this test binary re-run as another user, which needs root.
func TestDisallowedUIDRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to run a client as another uid: run it as root (sudo -E env PATH=\"$PATH\" go test -run TestDisallowedUIDRefused ./host/control/plane/)")
	}
	const uid, gid = 4243, 4242
	bin := copyTestBinary(t)
	for _, tc := range []struct {
		allow []int
		want  string
	}{
		{nil, "refused"},
		{[]int{uid}, "served"},
	} {
		e := newEnv(t, func(c *Config) {
			// The group makes the socket reachable through file modes, so
			// that the peer-credential check is what decides.
			c.Socket = uds.Options{Path: c.Socket.Path, Group: fmt.Sprint(gid), AllowUIDs: tc.allow}
			if err := os.Chmod(filepath.Dir(filepath.Dir(c.Socket.Path)), 0o755); err != nil {
				t.Fatal(err)
			}
		})
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+e.plane.SocketPath())
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client as uid %d: %v: %s", uid, err, out)
		}
		t.Logf("allow %v: %s", tc.allow, out)
		if !strings.HasPrefix(string(out), tc.want) || strings.Contains(string(out), "permission denied") {
			t.Fatalf("allow %v: client as uid %d got %q, want %s", tc.allow, uid, out, tc.want)
		}
		e.stop()
	}
}

// copyTestBinary puts this test binary where another user can run it.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
