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
	"github.com/kvpilot/kvpilot/host/control/plane"
	"github.com/kvpilot/kvpilot/host/control/publish"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/host/uds"
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
// configuration last. When the daemon does not build its control plane
// itself (not wired yet), the plane is assembled here over the daemon's
// parts, exactly as the daemon would.
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
	dctx, dcancel := context.WithCancel(context.Background())
	ddone := make(chan struct{})
	var p *plane.Plane
	if h.Socket == "" {
		p, err = plane.New(dctx, plane.Config{
			Socket:   uds.Options{Path: cfg.ControlSocket()},
			Executor: d.Executor(), Index: d.Index(), Events: d.Events(), NATS: d.NATS().Conn(),
			WorkerID: cfg.WorkerID, EventsSubject: cfg.EventsSubject(), EventsFormat: publish.Format(cfg.Events.Format),
			WorkerSubject: cfg.WorkerSubject(), BroadcastSubject: cfg.NATS.BroadcastSubject,
			RateLimit: cfg.NATS.RateLimit, RateBurst: cfg.NATS.RateBurst, Metrics: d.Metrics(),
		})
		if err != nil {
			dcancel()
			d.Run(dctx) // closes what New opened
			return nil, err
		}
		h.Socket = p.SocketPath()
	}
	go func() { defer close(ddone); d.Run(dctx) }()
	// The plane stops first: it publishes the events left while the
	// daemon's NATS connection is still open.
	pctx, pcancel := context.WithCancel(context.Background())
	pdone := make(chan struct{})
	go func() {
		defer close(pdone)
		if p != nil {
			p.Run(pctx)
		}
	}()
	h.stop = func() {
		pcancel()
		<-pdone
		dcancel()
		<-ddone
	}
	return h, nil
}

// Stop stops the control plane, then the daemon, and waits for both.
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
