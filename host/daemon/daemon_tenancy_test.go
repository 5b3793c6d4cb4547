package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// controlPeerEnv, when set to "SOCKET|HASH_A|HASH_B", makes the test
// binary a Control client (see init) that acts for tenants a and b and
// prints one "step: outcome" line per call.
const controlPeerEnv = "KVPILOT_TEST_CONTROL_PEER"

func init() {
	v := os.Getenv(controlPeerEnv)
	if v == "" {
		return
	}
	for _, line := range controlPeer(v) {
		fmt.Println(line)
	}
	os.Exit(0)
}

// controlPeer makes the calls of TestControlTenancyAcrossUIDs and reports
// each outcome: "ok", a registry code, or what a Stats answer held.
func controlPeer(arg string) []string {
	parts := strings.Split(arg, "|")
	if len(parts) != 3 {
		return []string{"error: want SOCKET|HASH_A|HASH_B"}
	}
	ha, errA := strconv.ParseUint(parts[1], 10, 64)
	hb, errB := strconv.ParseUint(parts[2], 10, 64)
	c, err := controlclient.DialUnix(parts[0], controlclient.UnixOptions{Source: "peer"})
	if err = errors.Join(errA, errB, err); err != nil {
		return []string{"error: " + err.Error()}
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	outcome := func(err error) string {
		if e, ok := errcode.As(err); ok {
			return string(e.Code)
		}
		if err != nil {
			return "error " + err.Error()
		}
		return "ok"
	}
	pin := func(tenant string, h uint64) string {
		r, err := c.Apply(ctx, directive.Turn{Tenant: tenant, Directives: []directive.Directive{directive.Cache{BlockHashes: []directive.Hash{directive.Hash(h)}, Pin: true}}})
		if err != nil || r.OK() {
			return outcome(err)
		}
		return outcome(r.Error)
	}
	var out []string
	out = append(out, "apply b: "+pin("b", hb), "apply a: "+pin("a", ha))
	cc, err := c.CacheControl(ctx, directive.CacheControl{Action: directive.ActionEvictDescendants, BlockHashes: []directive.Hash{directive.Hash(hb)}}, "b")
	if err == nil && cc.Status != directive.StatusOK {
		err = errcode.New(cc.Code, "%s", cc.Message)
	}
	out = append(out, "cache_control b: "+outcome(err))
	_, err = c.TenantStats(ctx, "b")
	out = append(out, "stats b: "+outcome(err))
	s, err := c.Stats(ctx)
	out = append(out, fmt.Sprintf("stats: %s tenant=%s pages=%d pinned=%d", outcome(err), s.Tenant, s.TenantPages, s.TenantPinnedPages))
	err = c.Watch(ctx, controlclient.WatchOptions{Tenant: "b"}, func(controlclient.Event) error { return controlclient.ErrStop })
	out = append(out, "watch b: "+outcome(err))
	// Six calls so far; the burst is eight: the ninth is refused.
	for i := 7; i <= 9; i++ {
		_, err = c.Stats(ctx)
		out = append(out, fmt.Sprintf("stats %d: %s", i, outcome(err)))
	}
	return out
}

// Through a running host, with control.tenants binding uid 4243 to tenant
// a and the host's own uid to "*": the peer, a real process of uid 4243 on
// the Control socket, is refused tenant b on Apply, CacheControl, Stats and
// WatchEvents (permission_denied, audited under its uid) and changes
// nothing of b's; it pins a's page, and its Stats default to tenant a. Its
// ninth call in a burst of eight is rate limited, while the host's own uid,
// with a bucket of its own, is still served.
func TestControlTenancyAcrossUIDs(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to run a Control client as another uid: run it as root (sudo -E env PATH=\"$PATH\" go test -run TestControlTenancyAcrossUIDs ./host/daemon/)")
	}
	bin := copyPeerBinary(t)
	c := modelConfig(t)
	c.Control.AllowUIDs = []int{peerUID}
	c.Control.Group = strconv.Itoa(peerGID)
	c.Control.Tenants = map[string][]string{strconv.Itoa(peerUID): {"a"}, strconv.Itoa(os.Getuid()): {config.TenantWildcard}}
	c.Control.RateLimit, c.Control.RateBurst = 0.2, 8
	peerReachable(t, &c)
	d := startWithEngine(t, c)
	ha, _ := commitPages(t, d, "a", []uint32{1, 2, 3, 4})
	hb, _ := commitPages(t, d, "b", []uint32{1, 2, 3, 4, 5, 6, 7, 8})
	beforeB := tenantState(d, "b", hb.Sequence)

	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d|%d", controlPeerEnv, d.ControlSocket(), ha.Sequence[0], hb.Sequence[0]))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: peerUID, Gid: peerGID}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("peer as uid %d: %v: %s", peerUID, err, out)
	}
	t.Logf("peer as uid %d:\n%s", peerUID, out)
	want := []string{
		"apply b: permission_denied",
		"apply a: ok",
		"cache_control b: permission_denied",
		"stats b: permission_denied",
		"stats: ok tenant=a pages=1 pinned=1",
		"watch b: permission_denied",
		"stats 7: ok",
		"stats 8: ok",
		"stats 9: rate_limited",
	}
	if got := strings.TrimSpace(string(out)); got != strings.Join(want, "\n") {
		t.Fatalf("peer outcomes:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if after := tenantState(d, "b", hb.Sequence); after != beforeB {
		t.Fatalf("the peer changed tenant b:\n%s\n%s", beforeB, after)
	}
	if p, ok := pageInfo(d, "a", ha.Sequence[0]); !ok || p.PinCount != 1 {
		t.Fatalf("the peer's pin of its own tenant's page: %+v %v", p, ok)
	}

	// The refusals are in the audit log under the peer's uid.
	d.core.audit.Flush()
	recs, err := executor.ReadAuditFile(filepath.Join(c.DataDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var denied []string
	for _, r := range recs {
		if r.Code == errcode.PermissionDenied {
			if r.Source != fmt.Sprintf("uds:uid=%d:peer", peerUID) || r.Tenant != "b" {
				t.Fatalf("audit record %+v", r)
			}
			denied = append(denied, r.Verb)
		}
	}
	if strings.Join(denied, ",") != "turn,evict_descendants" {
		t.Fatalf("audited refusals %v, want the turn and the cache_control request", denied)
	}

	// The host's own uid has its own bucket and may act for any tenant.
	tr := dialTransports(t, d, "operator")
	r := tr.apply(t, "uds", directive.Turn{Tenant: "b", Directives: []directive.Directive{directive.Cache{BlockHashes: isoHashes(hb.Sequence[0]), Pin: true}}})
	if !r.OK() {
		t.Fatalf("the wildcard uid during the peer's limit: %+v", r)
	}
}
