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
// without it. What nobody configured takes the measured default the engine
// can honour (config.Splice.For): the guard where the engine ranks kept
// tokens, the first tokens where the front door prefills them for a
// connector engine; an engine that can do neither is told so once, at
// info, and its splices stay uncorrected.

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

// recomputesOf is what a registration's engine can recompute of a
// splice's kept tokens on this host.
func (d *Daemon) recomputesOf(mode engine.Mode, registered bool) config.Recomputes {
	switch {
	case mode == engine.ModeArena && registered:
		return config.RecomputesRanked
	case mode == engine.ModeConnector && d.cfg.Gateway.Listen != "":
		return config.RecomputesFirst
	}
	return config.RecomputesNothing
}

// logDefaults says once, at info, what an engine's splices get when the
// configuration leaves the recompute to its defaults.
func (d *Daemon) logDefaults(reg engine.Registration, can config.Recomputes) {
	guard, first := d.cfg.Splice.Defaulted()
	if !guard && !first {
		return
	}
	r := d.cfg.Splice.For("", can)
	switch can {
	case config.RecomputesNothing:
		if d.defaultsToldNothing.CompareAndSwap(false, true) {
			d.log.Info("splices of this engine recompute none of the tokens they keep: it registered no recompute, and the defaults (the quality guard, splice.max_kl, for an engine that ranks kept tokens; splice.recompute.first through the front door for a connector engine) need one or the other; set splice.max_kl: 0 and splice.recompute.first: 0 to say so",
				"engine_id", reg.EngineID, "mode", reg.Mode)
		}
	default:
		d.log.Info("splices recompute by default", "engine_id", reg.EngineID, "recomputes", can.String(), "max_kl", r.MaxKL, "first", r.First)
	}
}

// spliceRule is the splicer's Rule: a tenant's recompute on an engine that
// can recompute can.
func spliceRule(c config.Splice, can config.Recomputes) func(string) splice.Recompute {
	return func(tenant string) splice.Recompute {
		r := c.For(tenant, can)
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
