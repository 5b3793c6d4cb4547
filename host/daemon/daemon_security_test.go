package daemon

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// enginePeerEnv, when set, makes the test binary an engine peer (see
// init): "dial:SOCKET" registers through engineclient (engine socket,
// then the descriptor side channel); "claim:FDSOCKET:HEXTOKEN" claims a
// registration's descriptors directly. It prints "served" or "refused: why".
const enginePeerEnv = "KVPILOT_TEST_ENGINE_PEER"

// init, not TestMain (main_test.go has it): the peer must act before any
// test machinery runs, in a process started as another uid.
func init() {
	v := os.Getenv(enginePeerEnv)
	if v == "" {
		return
	}
	mode, arg, _ := strings.Cut(v, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var err error
	switch mode {
	case "dial":
		var c *engineclient.Client
		c, err = engineclient.Dial(ctx, engineclient.Options{Socket: arg, EngineID: "peer", Layout: tinyLayout(), Rope: engineclient.RopeConfig{Base: 10000}})
		if err == nil {
			_ = c.Close()
		}
	case "claim":
		path, tok, _ := strings.Cut(arg, ":")
		err = claimAs(ctx, path, tok)
	default:
		err = fmt.Errorf("unknown peer mode %q", mode)
	}
	if err != nil {
		fmt.Println("refused:", err)
	} else {
		fmt.Println("served")
	}
	os.Exit(0)
}

func claimAs(ctx context.Context, path, hexTok string) error {
	tok, err := hex.DecodeString(hexTok)
	if err != nil {
		return err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(enginewire.EncodeFDRequest(tok)); err != nil {
		return err
	}
	buf := make([]byte, enginewire.FDReplyMax)
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("read reply: %w", err)
	}
	count, reason, err := enginewire.DecodeFDReply(buf[:n])
	if err != nil {
		return err
	}
	if count == 0 {
		return fmt.Errorf("claim refused: %s", reason)
	}
	return nil
}

const peerUID, peerGID = 4243, 4242

// runPeer runs this test binary as uid peerUID with the given peer mode.
func runPeer(t *testing.T, bin, mode string) string {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), enginePeerEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: peerUID, Gid: peerGID}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("peer as uid %d: %v: %s", peerUID, err, out)
	}
	return string(out)
}

// peerReachable makes the data dir traversable by other users and the
// sockets group-owned, so that the peer-credential check, not file modes,
// is what decides.
func peerReachable(t *testing.T, c *config.Config) {
	t.Helper()
	c.Engine.Group = fmt.Sprint(peerGID)
	for dir := c.DataDir; dir != os.TempDir() && dir != "/" && len(dir) > 1; dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// An engine running as a uid not on engine.allow_uids is refused on the
// Engine socket, and on the descriptor side channel; allowed, the same
// peer registers and receives its pools' descriptors.
func TestEngineSocketRefusesDisallowedUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to run an engine as another uid: run it as root (sudo -E env PATH=\"$PATH\" go test -run TestEngineSocketRefusesDisallowedUID ./host/daemon/)")
	}
	bin := copyPeerBinary(t)
	for _, tc := range []struct {
		allow []int
		want  string
	}{
		{nil, "refused"},
		{[]int{peerUID}, "served"},
	} {
		c := modelConfig(t)
		c.Engine.AllowUIDs = tc.allow
		peerReachable(t, &c)
		d := startWithEngine(t, c)
		out := runPeer(t, bin, "dial:"+d.cfg.EngineSocket())
		t.Logf("engine socket, allow %v: %s", tc.allow, out)
		if !strings.HasPrefix(out, tc.want) || strings.Contains(out, "permission denied") {
			t.Fatalf("allow %v: engine as uid %d got %q, want %s", tc.allow, peerUID, out, tc.want)
		}
		// The side channel alone, with a token that does not exist: a
		// disallowed uid is cut off before it can even ask.
		out = runPeer(t, bin, "claim:"+d.cfg.EngineFDSocket()+":"+hex.EncodeToString([]byte("0123456789abcdef")))
		t.Logf("side channel, allow %v: %s", tc.allow, out)
		if !strings.HasPrefix(out, "refused") || strings.Contains(out, "permission denied") {
			t.Fatalf("side channel claim as uid %d: %q", peerUID, out)
		}
		if tc.allow == nil && strings.Contains(out, "unknown or already claimed") {
			t.Fatalf("a disallowed uid reached the claim check: %q", out)
		}
	}
}

// A registration's descriptor token is bound to the uid that registered:
// another allowed uid that learns it cannot claim the pools.
func TestDescriptorTokenBoundToRegisteringUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to claim as another uid: run it as root (sudo -E env PATH=\"$PATH\" go test -run TestDescriptorTokenBoundToRegisteringUID ./host/daemon/)")
	}
	bin := copyPeerBinary(t)
	c := modelConfig(t)
	c.Engine.AllowUIDs = []int{peerUID}
	peerReachable(t, &c)
	d := startWithEngine(t, c)
	conn, err := grpc.NewClient("unix:"+d.cfg.EngineSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := pb.NewEngineClient(conn).Register(ctx, &pb.RegisterRequest{
		ApiVersion: 1, EngineId: "root-engine", Model: "tiny", PageSize: 4, Dtype: "bf16", Layers: 2,
		Buffers:   []*pb.KVBuffer{{Name: "k", Heads: 1, HeadDim: 8}, {Name: "v", Heads: 1, HeadDim: 8}},
		RopeSlice: &pb.RopeSlice{Buffer: 0, Offset: 0, Dim: 8, Style: "half_split"},
		Rope:      &pb.RopeConfig{Base: 10000},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetFdToken()) == 0 {
		t.Fatal("registration carries no descriptor token")
	}
	out := runPeer(t, bin, "claim:"+resp.GetFdSocket()+":"+hex.EncodeToString(resp.GetFdToken()))
	t.Logf("claim of root's token as uid %d: %s", peerUID, out)
	if !strings.HasPrefix(out, "refused") || !strings.Contains(out, "registered by uid 0") {
		t.Fatalf("another uid claimed root's descriptors: %q", out)
	}
}

// copyPeerBinary puts this test binary where another user can run it.
func copyPeerBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kvpbin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "peer.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// Through a running host: a NATS source past nats.rate_limit is refused
// with rate_limited (a registered code whose hint says to slow down) on
// both the turn and the cache_control paths, changing nothing, while the
// Control socket and other sources keep being served.
func TestNATSRateLimitRefusesClearly(t *testing.T) {
	c := modelConfig(t)
	c.NATS.RateLimit, c.NATS.RateBurst = 0.01, 2
	d := startWithEngine(t, c)
	h, _ := commitPages(t, d, "acme", []uint32{1, 2, 3, 4})
	tr := dialTransports(t, d, "burst")
	pin := directive.Turn{Tenant: "acme", Directives: []directive.Directive{directive.Cache{BlockHashes: isoHashes(h.Sequence[0]), Pin: true}}}
	for i := 0; i < 2; i++ {
		if r := tr.apply(t, "nats", pin); !r.OK() {
			t.Fatalf("command %d within the burst: %+v", i, r)
		}
	}
	before := tenantState(d, "acme", h.Sequence)
	r := tr.apply(t, "nats", pin)
	if r.OK() || r.Error == nil || r.Error.Code != errcode.RateLimited {
		t.Fatalf("third command past a burst of 2: %+v", r)
	}
	if e := r.Error.Entry(); e.Hint == "" || !strings.Contains(r.Error.Error(), "rate limited") || !strings.Contains(r.Error.Detail, "burst") {
		t.Fatalf("rate limit error is not clear: %q (hint %q)", r.Error.Error(), e.Hint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc, err := tr.nats.CacheControl(ctx, directive.CacheControl{Action: directive.ActionPinBlocks, BlockHashes: isoHashes(h.Sequence[0])}, "acme")
	if err != nil || cc.Status != directive.StatusError || cc.Code != errcode.RateLimited {
		t.Fatalf("cache_control past the limit: %+v %v", cc, err)
	}
	if after := tenantState(d, "acme", h.Sequence); after != before {
		t.Fatalf("refused commands changed the index:\n%s\n%s", before, after)
	}
	if r := tr.apply(t, "uds", pin); !r.OK() {
		t.Fatalf("control socket during the NATS limit: %+v", r)
	}
	other := dialTransports(t, d, "other-router")
	if r := other.apply(t, "nats", pin); !r.OK() {
		t.Fatalf("another source during the limit: %+v", r)
	}
}
