// Package controlhost starts a real kvpilot host inside the calling
// process, for `kvpilot bench control` and the ctl command's tests: they
// talk to it over its Control socket and NATS as a client would.
package controlhost

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
)

// Host is a real host for control benchmarks and ctl tests: the daemon
// with its index, executor, audit log and embedded NATS (listening on a
// free loopback port), and its control plane.
type Host struct {
	Daemon *daemon.Daemon
	// Socket is the Control socket's path.
	Socket string
	// NATSURL is the embedded server's client URL; Subject the worker's
	// command subject on it.
	NATSURL string
	Subject string
	stop    func()
}

// Start starts a host under dir; adjust, when given, edits its
// configuration last. The daemon builds its own control plane, so the
// host is reached through its Control socket and NATS, its ingress and
// its metrics, exactly as a client reaches a host.
func Start(dir string, adjust ...func(*config.Config)) (*Host, error) {
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.HTTP.Listen = ""
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.NATS.RateLimit = 0 // the benchmark is one source sending as fast as it can
	cfg.Control.RateLimit = 0
	for _, f := range adjust {
		f(&cfg)
	}
	d, err := daemon.New(cfg, hclog.NewNullLogger())
	if err != nil {
		return nil, err
	}
	h := &Host{Daemon: d, Socket: d.ControlSocket(), NATSURL: d.NATS().ClientURL(), Subject: cfg.WorkerSubject()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	h.stop = func() {
		cancel()
		<-done
	}
	return h, nil
}

// Stop stops the host and waits for it.
func (h *Host) Stop() { h.stop() }

// Commit caches tokens on the device for tenant, as an engine would, and
// returns the pages' sequence hashes.
func (h *Host) Commit(tenant string, tokens []uint32) (seqs []uint64, err error) {
	h.Daemon.Index().Do(func(ix *cache.Index) {
		var m cache.MatchResult
		ix.Match(tenant, blockid.Salt{Namespace: tenant}, tokens, &m)
		locs := make([]uint64, len(m.Hashes.Local))
		var res cache.CommitResult
		if err = ix.Commit(tenant, m.Hashes, locs, &res); err == nil {
			seqs = append([]uint64(nil), m.Hashes.Sequence...)
		}
	})
	return seqs, err
}
