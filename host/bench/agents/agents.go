package agents

import (
	"context"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// Run runs every arm of p on its engine and returns the report.
func Run(ctx context.Context, p Params, prog scenario.Progress) (*Report, error) {
	p.defaults()
	if err := p.validate(); err != nil {
		return nil, err
	}
	ss := p.sessions()
	if p.Engine == EngineVLLM {
		return runVLLM(ctx, p, ss, prog)
	}
	return runRef(ctx, p, ss, prog)
}
