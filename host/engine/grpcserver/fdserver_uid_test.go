package grpcserver

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

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/host/pool/fdpass"
	"github.com/kvpilot/kvpilot/host/uds"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// fdClaimEnv, when set to "SOCKET:HEXTOKEN", makes this test binary a
// descriptor claimant (see init): it claims the token on the side channel
// and prints "served N" or "refused: why". The test runs it as another uid.
const fdClaimEnv = "KVPILOT_TEST_FD_CLAIM"

// init, not TestMain (the external test package has it): the claimant
// must act before any test machinery runs, in a process of another uid.
func init() {
	v := os.Getenv(fdClaimEnv)
	if v == "" {
		return
	}
	path, tok, _ := strings.Cut(v, ":")
	n, err := claimFDs(path, tok)
	if err != nil {
		fmt.Println("refused:", err)
	} else {
		fmt.Println("served", n)
	}
	os.Exit(0)
}

// claimFDs presents a token on the side channel and returns how many
// descriptors came back (closing them).
func claimFDs(path, hexTok string) (int, error) {
	tok, err := hex.DecodeString(hexTok)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	_ = uc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := uc.Write(enginewire.EncodeFDRequest(tok)); err != nil {
		return 0, err
	}
	buf := make([]byte, enginewire.FDReplyMax)
	n, fds, err := fdpass.Recv(uc, buf)
	if err != nil {
		return 0, fmt.Errorf("read reply: %w", err)
	}
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
	count, reason, err := enginewire.DecodeFDReply(buf[:n])
	if err != nil {
		return 0, err
	}
	if count == 0 {
		return 0, fmt.Errorf("claim refused: %s", reason)
	}
	if count != len(fds) {
		return 0, fmt.Errorf("reply says %d descriptors, %d came", count, len(fds))
	}
	return count, nil
}

const claimUID, claimGID = 4245, 4244

// A process of another uid that the socket admits and that learned a
// registration's token is refused, and its attempts do not consume the
// token: the registering engine's own claim still succeeds afterwards
// (before the fix, the first wrong-uid claim burned it: a denial of
// service by any admitted local process).
func TestFDClaimFromWrongUIDKeepsToken(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to claim as another uid: run it as root (sudo -E env PATH=\"$PATH\" go test -run TestFDClaimFromWrongUIDKeepsToken ./host/engine/grpcserver/)")
	}
	bin := copyTestBinary(t)
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/" && len(d) > 1; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "run", "fd.sock")
	// The socket admits the other uid: the token's uid binding, not the
	// allow-list, is what must decide.
	ln, err := uds.Listen(uds.Options{Path: sock, Group: fmt.Sprint(claimGID), AllowUIDs: []int{claimUID}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFDServer(nil, hclog.NewNullLogger())
	done := make(chan error, 1)
	go func() { done <- f.serve(ln) }()
	defer func() {
		f.close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	memfd, err := unix.MemfdCreate("kvpilot-test-pool", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(memfd)
	tok := hex.EncodeToString(f.offer("reg-1", os.Getuid(), []int{memfd}))

	for i := 0; i < 3; i++ {
		out := runClaimant(t, bin, sock+":"+tok)
		if !strings.HasPrefix(out, "refused") || !strings.Contains(out, fmt.Sprintf("uid %d claimed descriptors registered by uid 0", claimUID)) {
			t.Fatalf("claim %d as uid %d: %q", i, claimUID, out)
		}
	}
	n, err := claimFDs(sock, tok)
	if err != nil || n != 1 {
		t.Fatalf("the registering uid's claim after refused ones: %d descriptors, %v", n, err)
	}
	// One claim per token still holds.
	if _, err := claimFDs(sock, tok); err == nil || !strings.Contains(err.Error(), "already claimed") {
		t.Fatalf("second claim of a claimed token: %v", err)
	}
}

// An expired token is refused and removed, whoever asks.
func TestFDClaimExpiredTokenRemoved(t *testing.T) {
	f := newFDServer(nil, hclog.NewNullLogger())
	tok := f.offer("reg-1", 7, []int{3})
	if o, why := f.claim(tok, 7, time.Now().Add(offerTTL+time.Second)); o != nil || !strings.Contains(why, "expired") {
		t.Fatalf("expired claim: %v %q", o, why)
	}
	if o, why := f.claim(tok, 7, time.Now()); o != nil || !strings.Contains(why, "unknown or already claimed") {
		t.Fatalf("claim after expiry: %v %q", o, why)
	}
}

func runClaimant(t *testing.T, bin, arg string) string {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), fdClaimEnv+"="+arg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: claimUID, Gid: claimGID}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("claimant as uid %d: %v: %s", claimUID, err, out)
	}
	return strings.TrimSpace(string(out))
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
	dir, err := os.MkdirTemp("", "kvpbin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "claim.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
