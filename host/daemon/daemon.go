// Package daemon assembles a kvpilot host from its configuration: it builds
// each component, serves /healthz and /metrics, and shuts everything down in
// reverse order when its context ends.
//
// Components are added here as they land; each registers a health check so
// /healthz reports what is actually running.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/control/plane"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/gateway"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/preflight"
	"github.com/kvpilot/kvpilot/plugins"
)

// Option adjusts how New builds a host.
type Option func(*Daemon)

// WithConfigFile makes the host hot-swap policies when the policies
// section of the config file at path changes (re-read with environ).
func WithConfigFile(path string, environ []string) Option {
	return func(d *Daemon) { d.configPath, d.environ = path, environ }
}

// WithPolicyExecutable sets the binary that runs built-in policies as
// `<exe> policy NAME` (default: this process's executable, which is right
// for the kvpilot command and wrong for a test binary).
func WithPolicyExecutable(exe string) Option { return func(d *Daemon) { d.policyExe = exe } }

// WithTokenizer gives the host the model's tokenizer, so policy splices
// with a text replacement (the truncation policy's stubs) are applied as
// the token ids it returns. Without one they are refused as
// not_supported_yet: the engine protocol carries no tokenizer.
func WithTokenizer(tokenize func(text string) ([]uint32, error)) Option {
	return func(d *Daemon) { d.tokenize = tokenize }
}

// WithGatewayRules sets the edits the front door applies to requests
// without context_management, instead of those it derives from the
// configured policies (benchmarks compare edit strategies with no policy
// plugin acting on the cache).
func WithGatewayRules(r gateway.Rules) Option {
	return func(d *Daemon) { d.gatewayRules = &r }
}

// Daemon is one running host.
type Daemon struct {
	cfg     config.Config
	log     hclog.Logger
	metrics *metrics.Metrics

	mu     sync.Mutex
	checks map[string]func() error
	// defaultsToldNothing: the host logged that an engine gets no
	// recompute from the defaults (recompute.go), once.
	defaultsToldNothing atomic.Bool

	core    core
	meta    metaState
	control *plane.Plane
	engine  *engineHost
	// attached is what the executor is bound to once pools open (splice.go).
	attached attachments
	// tokenize turns text splice replacements into token ids (WithTokenizer).
	tokenize func(string) ([]uint32, error)
	// life ends when the host shuts down; background work started on a
	// caller's behalf (warm transfers, releases) runs under it.
	life context.Context
	stop context.CancelFunc

	// policies runs the policy plugins; configPath and environ, when set,
	// make Run hot-swap them as the config file changes.
	policies   *plugins.Runtime
	policyExe  string
	configPath string
	environ    []string

	httpLn  net.Listener
	closers []func() error

	// gateway is the front door (gateway.listen), nil when off.
	gateway      *gateway.Server
	gatewayLn    net.Listener
	gatewayRules *gateway.Rules
}

// New builds a host from cfg. It binds its listeners but serves nothing until
// Run.
func New(cfg config.Config, log hclog.Logger, opts ...Option) (*Daemon, error) {
	d := &Daemon{cfg: cfg, log: log, metrics: metrics.New(), checks: map[string]func() error{}}
	for _, o := range opts {
		o(d)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(cfg.GCPercent)
	}
	d.life, d.stop = context.WithCancel(context.Background())
	if err := d.build(); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// build constructs the components in dependency order. The configuration
// is checked against the machine first (host/preflight: directories, and
// tier sizes when a model is configured), then the HTTP port is bound: a
// busy port fails before any plugin process is started.
func (d *Daemon) build() error {
	if err := preflight.Start(d.cfg); err != nil {
		return err
	}
	if d.cfg.HTTP.Listen != "" {
		ln, err := net.Listen("tcp", d.cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("http.listen %s: %w (pick a free address, or set it to \"\" to disable)", d.cfg.HTTP.Listen, err)
		}
		d.httpLn = ln
		d.closers = append(d.closers, func() error { return ignoreClosed(ln.Close()) })
	}
	if err := d.bindGateway(); err != nil {
		return err
	}
	if err := d.buildMeta(); err != nil {
		return err
	}
	if err := d.buildCore(); err != nil {
		return err
	}
	if err := d.buildPolicies(); err != nil {
		return err
	}
	if err := d.buildEngine(); err != nil {
		return err
	}
	if err := d.buildControl(); err != nil {
		return err
	}
	return d.buildGateway()
}

// Index returns the cache index and the lock that must be held while
// calling it.
func (d *Daemon) Index() *guarded.Index { return d.core.index }

// NATS returns the host's NATS connection (embedded server or cluster).
func (d *Daemon) NATS() *natsembed.NATS { return d.core.nats }

// Events returns the queue of index events waiting to be published.
func (d *Daemon) Events() *events.Queue { return d.core.events }

// Config returns the configuration the host was built from.
func (d *Daemon) Config() config.Config { return d.cfg }

// Log returns the host's logger.
func (d *Daemon) Log() hclog.Logger { return d.log }

// Metrics returns the host's metrics.
func (d *Daemon) Metrics() *metrics.Metrics { return d.metrics }

// AddCheck registers a named health check for /healthz.
func (d *Daemon) AddCheck(name string, check func() error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checks[name] = check
}

// HTTPAddr is the address /metrics and /healthz are served on, or "" when
// disabled.
func (d *Daemon) HTTPAddr() string {
	if d.httpLn == nil {
		return ""
	}
	return d.httpLn.Addr().String()
}

// Run serves until ctx is done, then shuts down.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.close()

	errc := make(chan error, 1)
	var srv *http.Server
	if d.httpLn != nil {
		srv = &http.Server{Handler: d.handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- srv.Serve(d.httpLn) }()
		d.log.Info("serving metrics and health", "addr", d.HTTPAddr())
	}
	// The pages held only in memory go to disk once everything that moves
	// pages has stopped (wg), before the pools close (d.close).
	defer d.persistOnStop()
	var wg sync.WaitGroup
	defer wg.Wait() // deferred after persistOnStop, so it runs before it and after cancel
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); d.sweep(ctx) }()
	d.stepLoop(ctx, &wg)
	d.runEngine(ctx, &wg)
	d.runPolicies(ctx, &wg)
	d.runControl(ctx, &wg)
	d.feedKVEvents(ctx, &wg)
	d.runGateway(ctx, &wg)
	d.log.Info("host started", "worker_id", d.cfg.WorkerID, "data_dir", d.cfg.DataDir,
		"page_size", d.cfg.Index.PageSize, "device_pages", d.cfg.Tiers.Device.CapacityPages)
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
	}
	d.log.Info("shutting down")
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			d.log.Warn("http shutdown", "error", err)
		}
	}
	return nil
}

func (d *Daemon) close() {
	d.stop()
	for i := len(d.closers) - 1; i >= 0; i-- {
		if err := d.closers[i](); err != nil {
			d.log.Warn("shutdown step failed", "error", err)
		}
	}
	d.closers = nil
}

// ignoreClosed treats closing an already closed listener as success: the
// HTTP server closes its listener on a clean shutdown.
func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
