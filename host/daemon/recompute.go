package daemon

import (
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// What splices recompute (splice.recompute, splice.max_kl) is configured
// per host and per tenant and done by the engine: an engine that cannot do
// what the configuration asks is refused at registration, never served
// without it.

// checkRecompute is the engine service's CheckRecompute: an arena engine
// must register recompute when any rule asks for it; a connector engine
// (vLLM) cannot rank kept tokens, and recomputes the first tokens after
// an edit only through the front door's prefill request.
func (d *Daemon) checkRecompute(mode engine.Mode, recomputes bool) error {
	for _, r := range d.cfg.Splice.Rules() {
		switch {
		case !r.Any():
		case mode == engine.ModeConnector && r.Ranked():
			return errcode.New(errcode.RecomputeUnsupported, "splice.recompute.share and splice.max_kl need an engine that recomputes kept tokens itself; a connector-mode engine (vLLM) cannot: set them to 0 for this host and its tenants")
		case mode == engine.ModeConnector && d.cfg.Gateway.Listen == "":
			return errcode.New(errcode.RecomputeUnsupported, "splice.recompute.first on a connector-mode engine is done by the front door's prefill request: turn on the front door (gateway.listen) or set splice.recompute.first to 0")
		case mode == engine.ModeArena && !recomputes:
			return errcode.New(errcode.RecomputeUnsupported, "splice.recompute and splice.max_kl are set but this engine did not register recompute (it serves no sparse fill orders): set them to 0, or run an engine that recomputes (kvpilot.torchengine)")
		}
	}
	return nil
}

// spliceRule is the splicer's Rule: a tenant's configured recompute.
func spliceRule(c config.Splice) func(string) splice.Recompute {
	return func(tenant string) splice.Recompute {
		r := c.For(tenant)
		return splice.Recompute{First: r.First, Share: r.Share, MaxKL: r.MaxKL}
	}
}

// onRecompute logs and counts what a splice recomputed once the engine
// reported it.
func (d *Daemon) onRecompute(session string, r splice.RecomputeResult) {
	if m := d.metrics; m != nil {
		m.Splice.RecomputedTokens.Add(float64(r.Recomputed))
		m.Splice.RegionTokens.Add(float64(r.Region))
	}
	d.log.Debug("splice recomputed", "session", session, "recomputed", r.Recomputed, "region", r.Region,
		"named", r.Named, "estimated_kl", r.EstimatedKL, "max_kl", r.Asked.MaxKL, "share", r.Asked.Share)
}
