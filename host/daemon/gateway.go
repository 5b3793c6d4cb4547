package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/gateway"
	"github.com/kvpilot/kvpilot/host/tier"
)

// bindGateway binds the front door's port (gateway.listen; off when
// empty) before anything starts, as the HTTP port is.
func (d *Daemon) bindGateway() error {
	g := d.cfg.Gateway
	if g.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", g.Listen)
	if err != nil {
		return fmt.Errorf("gateway.listen %s: %w (pick a free address, or set it to \"\" to disable)", g.Listen, err)
	}
	d.gatewayLn = ln
	d.closers = append(d.closers, func() error { return ignoreClosed(ln.Close()) })
	return nil
}

// buildGateway builds the front door over the executor. Its edits for requests without
// context_management come from the configured policies as they are at
// start (a policy edit in a watched config reaches the front door at the
// next restart).
func (d *Daemon) buildGateway() error {
	g := d.cfg.Gateway
	if d.gatewayLn == nil {
		return nil
	}
	var rules gateway.Rules
	switch {
	case d.gatewayRules != nil:
		rules = *d.gatewayRules
	default:
		var err error
		if rules, err = gateway.PolicyRules(g.EditPolicies(d.cfg.Policies)); err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
	}
	if !d.cfg.Index.AutoSplice {
		d.log.Warn("gateway on with index.auto_splice off: edits reach the model, but the cache re-prefills after each one")
	}
	cfg := gateway.Config{Upstream: g.Upstream, UpstreamAPIKey: g.UpstreamAPIKey, Timeout: g.Timeout, TenantHeader: g.TenantHeader,
		Tenants: g.Tenants, MaxSessions: g.MaxSessions, Policy: rules, StickyClears: g.StickyClears, PageSize: d.cfg.Index.PageSize,
		AwaitSaves: g.AwaitSaves, Log: d.log.Named("gateway"), Metrics: &d.metrics.Gateway,
		Engine: gatewayEngine{d}, RecomputeFirst: func(tenant string) int { return d.cfg.Splice.For(tenant, config.RecomputesFirst).First }}
	if tok := d.tokenize; tok != nil {
		cfg.Tokenize = func(s string) []uint32 { t, _ := tok(s); return t }
	}
	d.gateway = gateway.New(cfg, gateway.IngressDirectives{In: d.core.in})
	return nil
}

// GatewayAddr is the front door's address, or "" when it is off.
func (d *Daemon) GatewayAddr() string {
	if d.gatewayLn == nil {
		return ""
	}
	return d.gatewayLn.Addr().String()
}

// runGateway serves the front door until ctx ends.
func (d *Daemon) runGateway(ctx context.Context, wg *sync.WaitGroup) {
	if d.gatewayLn == nil {
		return
	}
	srv := &http.Server{Handler: d.gateway.Handler(), ReadHeaderTimeout: 10 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(d.gatewayLn); err != nil && !errors.Is(err, http.ErrServerClosed) && ctx.Err() == nil {
			d.log.Error("gateway stopped", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	d.log.Info("serving the front door", "addr", d.GatewayAddr(), "upstream", d.cfg.Gateway.Upstream)
}

// gatewayEngine is the front door's view of the registered engine: a
// connector-mode engine has its splices' replacements prefilled by the
// front door (gateway.Engine).
type gatewayEngine struct{ d *Daemon }

func (g gatewayEngine) PrefillPage() (int, bool) {
	if g.d.engine == nil {
		return 0, false
	}
	reg, ok := g.d.engine.svc.Registration()
	if !ok || reg.Mode != engine.ModeConnector || !g.d.cfg.Index.AutoSplice {
		return 0, false
	}
	return g.d.core.index.PageSize(), true
}

func (g gatewayEngine) SessionTokens(tenant, session string) ([]uint32, int, bool) {
	if g.d.engine == nil {
		return nil, 0, false
	}
	s, ok := g.d.engine.svc.Session(session)
	if !ok || s.Tenant != tenant {
		return nil, 0, false
	}
	return s.Tokens, s.CachedTokens, true
}

// MakeRoom frees device slots for a splice's fresh pages.
func (g gatewayEngine) MakeRoom(ctx context.Context, pages int) {
	if mv := g.d.meta.mover.Load(); mv != nil {
		mv.MakeRoom(ctx, tier.Device, pages)
	}
}

// StagedPages counts the leading full pages of tokens on the device tier.
func (g gatewayEngine) StagedPages(tenant string, tokens []uint32) int {
	ix := g.d.core.index
	seqs := blockid.Compute(tokens, ix.PageSize(), ix.Salt(tenant)).Sequence
	n := 0
	ix.Do(func(ix *cache.Index) {
		for _, seq := range seqs {
			if info, ok := ix.Lookup(tenant, seq); !ok || !info.Tiers.Has(tier.Device) {
				return
			}
			n++
		}
	})
	return n
}

// Stage loads back the leading pages of tokens the index holds, as a
// Match does, within the engine's load-back deadline. It marks them used
// now, as a Match does, so eviction takes other pages first until the
// splice has moved them. Pages the index no longer holds anywhere are not
// asked for: the splice ends before them.
func (g gatewayEngine) Stage(ctx context.Context, tenant string, tokens []uint32) error {
	var m cache.MatchResult
	staged := true
	g.d.core.index.Do(func(ix *cache.Index) {
		ix.Match(tenant, ix.Salt(tenant), tokens, &m)
		for _, p := range m.Pages {
			staged = staged && p.Tiers.Has(tier.Device)
		}
	})
	if staged {
		return nil
	}
	mv := g.d.meta.mover.Load()
	if mv == nil {
		return errors.New("no pools are open")
	}
	seqs := make([]uint64, len(m.Pages))
	for i, p := range m.Pages {
		seqs[i] = p.Seq
	}
	_, err := mv.LoadBack(ctx, cache.TargetHashes(tenant, seqs...), time.Now().Add(g.d.cfg.Engine.LoadBackDeadline))
	return err
}
