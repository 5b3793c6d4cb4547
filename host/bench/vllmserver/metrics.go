package vllmserver

import (
	"context"
	"fmt"

	"github.com/kvpilot/kvpilot/host/bench/promtext"
)

// Counters are the totals a benchmark reads from vLLM's /metrics, summed
// over engines.
type Counters struct {
	// PromptTokens: vllm:prompt_tokens, every prompt token of every request.
	PromptTokens float64 `json:"prompt_tokens"`
	// LocalHits: vllm:prefix_cache_hits, tokens from vLLM's own prefix cache.
	LocalHits float64 `json:"local_hit_tokens"`
	// ExternalHits: vllm:external_prefix_cache_hits, tokens the KV
	// connector loaded (kvpilot's).
	ExternalHits float64 `json:"external_hit_tokens"`
	// Preemptions: vllm:num_preemptions, requests vLLM evicted for blocks.
	Preemptions float64 `json:"preemptions"`
}

// Sub is c less an earlier reading.
func (c Counters) Sub(o Counters) Counters {
	return Counters{PromptTokens: c.PromptTokens - o.PromptTokens, LocalHits: c.LocalHits - o.LocalHits,
		ExternalHits: c.ExternalHits - o.ExternalHits, Preemptions: c.Preemptions - o.Preemptions}
}

// Counters reads the server's /metrics.
func (s *Server) Counters(ctx context.Context) (Counters, error) {
	var c Counters
	samples, err := promtext.Get(ctx, s.URL+"/metrics")
	if err != nil {
		return c, fmt.Errorf("vLLM: %w", err)
	}
	fields := map[string]*float64{
		"vllm:prompt_tokens_total":              &c.PromptTokens,
		"vllm:prefix_cache_hits_total":          &c.LocalHits,
		"vllm:external_prefix_cache_hits_total": &c.ExternalHits,
		"vllm:num_preemptions_total":            &c.Preemptions,
	}
	for _, s := range samples {
		if dst := fields[s.Name]; dst != nil {
			*dst += s.Value
		}
	}
	return c, nil
}
