package natscmd

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/ingress"
)

// ingressOf is the door's ingress over ex: refusals audited to audit (nil:
// none), commands limited to perSecond per source (0: no limit).
func ingressOf(tb testing.TB, ex *executor.Executor, audit executor.AuditLog, perSecond float64) *ingress.Ingress {
	tb.Helper()
	cfg := ingress.Config{Executor: ex, Audit: audit}
	if perSecond > 0 {
		cfg.RateLimits = map[ingress.Door]ingress.RateLimit{ingress.NATS: {PerSecond: perSecond, Burst: 1 << 30, Key: "nats.rate_limit"}}
	}
	g, err := ingress.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}
