package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
)

// serveHTTP serves the engine's HTTP API and the host's fill orders until
// ctx ends.
func serveHTTP(ctx context.Context, e *refengine.Engine, addr string, o refengine.ServerOptions) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", addr, err)
	}
	fills := &refengine.FillServer{}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if err := fills.ServeFills(fctx, e); err != nil && fctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "refengine: fill stream:", err)
		}
	}()
	srv := &http.Server{Handler: refengine.NewServer(e, o).Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(map[string]any{"totals": e.Totals(), "fill_tokens": fills.Tokens.Load()})
}
