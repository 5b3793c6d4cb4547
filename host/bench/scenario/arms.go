package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kvpilot/kvpilot/examples/refengine"
)

// Shape is what every trace-replaying scenario's params hold: the
// deterministic system block before each session, the page size of the
// host and the engine, the reference engine's model (gqa or mla) and cost
// model (its modelled TTFT), and the device tier's pages (0: the scenario
// sizes it to what it replays).
type Shape struct {
	SystemTokens int                 `json:"system_tokens"`
	PageSize     int                 `json:"page_size"`
	Model        string              `json:"model"`
	Cost         refengine.CostModel `json:"cost"`
	DevicePages  int                 `json:"device_pages"`
}

// defaults fills what is zero: a 4K-token system block, pages of 16
// tokens, the gqa model at the reference engine's default cost.
func (s *Shape) defaults() {
	s.SystemTokens = cmp.Or(s.SystemTokens, 4000)
	s.PageSize = cmp.Or(s.PageSize, 16)
	s.Model = cmp.Or(s.Model, "gqa")
	s.Cost = cmp.Or(s.Cost, refengine.DefaultCost)
}

// rig shapes an arm's host and engine: DevicePages on the device and as
// many on the host (an arm changes what it needs to).
func (s Shape) rig() RigOptions {
	return RigOptions{PageSize: s.PageSize, DevicePages: s.DevicePages, HostPages: s.DevicePages, Model: s.Model, Cost: s.Cost}
}

// systemPrefix names the system block in a report.
func (s Shape) systemPrefix() string {
	return fmt.Sprintf("deterministic %d-token system block", s.SystemTokens)
}

// ArmStats is a splice-family arm's totals over the requests it measures.
type ArmStats struct {
	Requests      int     `json:"requests"`
	PromptTokens  int     `json:"prompt_tokens"`
	CachedTokens  int     `json:"cached_tokens"`
	PrefillTokens int     `json:"prefill_tokens"`
	HitRate       float64 `json:"hit_rate"`
	TTFTms        float64 `json:"ttft_ms"`
	// FillTokens are replacement tokens the engine prefilled for splices
	// (fill orders); they are counted in PrefillTokens too.
	FillTokens int `json:"fill_tokens"`
	Splices    int `json:"splices"`
	// CheckedRows are cached K/V rows the reference engine compared with
	// the contract, RotatedRows those that matched within round-off only
	// (keys a splice rotated).
	CheckedRows int    `json:"checked_rows"`
	RotatedRows int    `json:"rotated_rows"`
	ContractOK  bool   `json:"contract_ok"`
	Error       string `json:"error,omitempty"`
}

// turn runs r on the rig's engine as session's next request and adds it
// to a. A contract violation ends the arm: ok is false and err nil (the
// report says so, in ContractOK and Error); any other error is returned.
func (a *ArmStats) turn(ctx context.Context, rig *Rig, session, tenant string, r Request) (st refengine.TurnStats, ok bool, err error) {
	st, err = rig.turn(ctx, session, tenant, r)
	if errors.Is(err, refengine.ErrContract) {
		a.ContractOK, a.Error = false, err.Error()
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	a.add(st)
	return st, true, nil
}

func (a *ArmStats) add(st refengine.TurnStats) {
	a.Requests++
	a.PromptTokens += st.Prompt
	a.CachedTokens += st.Cached
	a.PrefillTokens += st.Prefilled
	a.HitRate = ratio(a.CachedTokens, a.PromptTokens)
	a.TTFTms += st.TTFTms
	a.CheckedRows += st.CheckedRows
	a.RotatedRows += st.RoundedRows
}

// runArms runs each arm in order on a fresh host shaped by o(arm) and
// returns their results by name; an error names the scenario and the arm.
func runArms[A any](ctx context.Context, name string, arms []string, o func(arm string) RigOptions, run func(rig *Rig, arm string) (A, error)) (map[string]A, error) {
	out := make(map[string]A, len(arms))
	for _, arm := range arms {
		rig, err := StartRig(ctx, o(arm))
		if err == nil {
			out[arm], err = run(rig, arm)
			rig.Close()
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, arm, err)
		}
	}
	return out, nil
}

// allContractOK: every arm's contract held.
func allContractOK(m map[string]ArmStats) bool {
	return !slices.ContainsFunc(slices.Collect(maps.Values(m)), func(a ArmStats) bool { return !a.ContractOK })
}

// barsOf is a bar per arm, in arms' order, of what value reads.
func barsOf(arms []string, value func(arm string) float64) []Bar {
	bars := make([]Bar, len(arms))
	for i, arm := range arms {
		bars[i] = Bar{arm, value(arm)}
	}
	return bars
}

// hitAndPrefill are the charts of arms that are ArmStats: the hit rate
// and the prefill of each, titled "<what> cache hit" and "<what> prefill".
func hitAndPrefill(what string, arms []string, m map[string]ArmStats) []Chart {
	return []Chart{
		{Title: what + "cache hit", Unit: "%", Bars: barsOf(arms, func(n string) float64 { return 100 * m[n].HitRate })},
		{Title: what + "prefill", Unit: "tokens", Bars: barsOf(arms, func(n string) float64 { return float64(m[n].PrefillTokens) })},
	}
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
