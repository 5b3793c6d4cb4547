package agents

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the run for a person: a row per arm and the targets
// (the JSON holds the samples behind the host's columns).
func (r *Report) WriteTable(w io.Writer) error {
	if r.FloodTargets != nil {
		return r.writeFlood(w)
	}
	p := r.Params
	fmt.Fprintf(w, "agents on %s: %d sessions, %d requests each at most, working set %d tokens\n",
		p.Engine, p.Sessions, p.Turns, r.WorkingSetTokens)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "arm\trequests\tfailed\tTTFT p50\tp95\tp99 ms\te2e p50 ms\treq/s\tcomputed\tcached\tof it kvpilot\tsame answer\thost RSS MiB (bound)\thits back s\t")
	for _, name := range p.Arms {
		a, ok := r.Arms[name]
		if !ok {
			continue
		}
		same, rss, back, kv := "-", "-", "-", "-"
		if n, ok := a.CachedBy["kvpilot"]; ok {
			kv = fmt.Sprint(n)
		}
		if a.Answers != nil {
			same = fmt.Sprintf("%d/%d", a.Answers.Same, a.Answers.Compared)
		}
		if a.Host != nil && a.Host.PeakRSSBytes > 0 {
			rss = fmt.Sprintf("%.0f", float64(a.Host.PeakRSSBytes)/(1<<20))
			if a.Host.MemoryBoundBytes > 0 {
				rss += fmt.Sprintf(" of %.0f", float64(a.Host.MemoryBoundBytes+hostBaseBytes)/(1<<20))
			}
		}
		if a.Fault != nil {
			back = fmt.Sprintf("%s %g", a.Fault.Kind, a.Fault.HitsResumedAfterS)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t%d\t%d\t%s\t%s\t%s\t%s\t\n", name, a.Requests, a.Failed,
			a.TTFTms.P50, a.TTFTms.P95, a.TTFTms.P99, a.E2Ems.P50, a.RPS, a.ComputedTokens,
			a.CachedTokens, kv, same, rss, back)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, name := range p.Arms {
		if a := r.Arms[name]; len(a.ErrorsByKind) > 0 {
			fmt.Fprintf(w, "%s errors: %v (first: %q)\n", name, a.ErrorsByKind, a.FirstErrors[0])
		}
	}
	if r.NoiseFloor != nil {
		fmt.Fprintf(w, "noise floor (the engine's own cache against the reference): %d/%d same\n", r.NoiseFloor.Same, r.NoiseFloor.Compared)
	}
	t := r.Targets
	_, err := fmt.Fprintf(w, "targets: kvpilot TTFT p50 %.2fx, p99 %.2fx engine-small's (<= 0.5); %.2fx, %.2fx engine-big's (<= 1.3); no failures %v; met %v\n",
		t.P50VsSmall, t.P99VsSmall, t.P50VsBig, t.P99VsBig, t.NoFailures, t.Met)
	return err
}

func (r *Report) writeFlood(w io.Writer) error {
	fmt.Fprintf(w, "flood on vLLM: a VIP session's %d-token system prompt against %d flood sessions\n",
		r.Flood[ArmSmall].PrefixTokens, r.Params.Sessions)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "arm\tflood tokens\tengine tokens\tx\tVIP requests\tfailed\tprefix hit\tTTFT p50\tp95 ms\tflood failed\t")
	for _, name := range []string{ArmSmall, ArmKvpilot} {
		v, a := r.Flood[name], r.Arms[name]
		if v == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%d\t%d\t%.2f\t%.0f\t%.0f\t%d\t\n", name, v.FloodTokens, v.EngineTokens, v.FloodFactor,
			v.Requests, v.Failed, v.PrefixHit, v.TTFTms.P50, v.TTFTms.P95, a.Failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := r.FloodTargets
	_, err := fmt.Fprintf(w, "targets: VIP prefix hit %.2f (>= 0.99), TTFT p50 %.1fx better than vLLM alone (>= 5); met %v\n",
		t.PrefixHit, t.TTFTSpeedup, t.Met)
	return err
}
