package grpcserver

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/uds"
)

// A host stopped right after it started can close the descriptor server
// before its serve loop begins: the loop must then return at once, not
// accept forever (the host's shutdown waited on it and hung).
func TestFDServerClosedBeforeServeReturns(t *testing.T) {
	f := newFDServer(nil, hclog.NewNullLogger())
	f.close()
	ln, err := uds.Listen(uds.Options{Path: filepath.Join(t.TempDir(), "fd.sock")})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.serve(ln) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		_ = ln.Close()
		t.Fatal("serve did not return after close")
	}
}
