package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kvpilot/kvpilot/host/config"
)

// The splice-quality scenario measures what a splice costs the model's
// answers: real edits of real agent sessions on SmolLM2-135M-Instruct, the
// next assistant turn scored by teacher forcing against a re-prefill, for
// the plain splice, recompute and the quality guard (through a real host)
// and the reference and baselines (in torch, on the rows the host cached).
// The Python side (kvbench.splicequality) runs everything; this side
// starts the host, passes the flags and reads its report.

// SpliceQualityOptions shape a splice-quality run.
type SpliceQualityOptions struct {
	// Python runs the child; empty: $KVPILOT_PYTHON, else .venv/bin/python
	// in the working directory or a parent, else python3.
	Python string
	// Traces is the agent traces directory the cases come from.
	Traces string
	// Cases runs the first N cases (0: all); Case names cases to run.
	Cases int
	Case  []string
	// ContextTokens bounds a case's context; MaxKL is the guard's budget
	// (0: the Python side's default).
	ContextTokens int
	MaxKL         float64
	// Args are passed to the child as they are.
	Args []string
	// Stderr receives the child's and the host's logs; nil discards them.
	Stderr io.Writer
}

// SpliceQualityArm is one arm over every case. The shares are absent for
// an arm that prefills nothing of the edited context (no_edit).
type SpliceQualityArm struct {
	KLMean          float64  `json:"kl_mean"`
	KLMax           float64  `json:"kl_max"`
	Top1            float64  `json:"top1"`
	FirstTop1       float64  `json:"first_top1"`
	PPLRatio        float64  `json:"ppl_ratio"`
	RecomputedShare *float64 `json:"recomputed_share"`
	ComputeShare    *float64 `json:"compute_share"`
}

// CurvePoint is one point of a method's curve.
type CurvePoint struct {
	Point           string  `json:"point"`
	RecomputedShare float64 `json:"recomputed_share"`
	KLMean          float64 `json:"kl_mean"`
	Top1            float64 `json:"top1"`
}

// SpliceQualityReport is the scenario's JSON, as the Python side prints it.
type SpliceQualityReport struct {
	Scenario string                      `json:"scenario"`
	Params   map[string]any              `json:"params"`
	Arms     map[string]SpliceQualityArm `json:"arms"`
	Curves   map[string][]CurvePoint     `json:"curves"`
	Checks   struct {
		ControlMaxAbsLogitDiff float64  `json:"control_max_abs_logit_diff"`
		RotationCases          int      `json:"rotation_cases"`
		RotationFailures       []string `json:"rotation_failures"`
	} `json:"checks"`
	Targets struct {
		GuardSaved float64 `json:"guard_saved"`
		GuardMet   bool    `json:"guard_met"`
		CurveMet   bool    `json:"curve_met"`
		Met        bool    `json:"met"`
	} `json:"targets"`
	// Extra is the whole report as the child printed it.
	Extra map[string]json.RawMessage `json:"-"`
}

// The arms, in the order the table shows them.
var spliceQualityArms = []string{"control", "reprefill", "splice", "splice_gap",
	"recompute_first_16", "recompute_first_64", "recompute_first_256",
	"recompute_deviation_5", "recompute_deviation_15", "recompute_deviation_30", "guard", "no_edit"}

// RunSpliceQuality starts a host with a temporary data directory, runs the
// Python side against it and returns its report.
func RunSpliceQuality(ctx context.Context, o SpliceQualityOptions) (*SpliceQualityReport, error) {
	var args []string
	if o.Traces != "" {
		args = append(args, "--traces", o.Traces)
	}
	if o.Cases > 0 {
		args = append(args, "--cases", strconv.Itoa(o.Cases))
	}
	for _, c := range o.Case {
		args = append(args, "--case", c)
	}
	if o.ContextTokens > 0 {
		args = append(args, "--context-tokens", strconv.Itoa(o.ContextTokens))
	}
	if o.MaxKL > 0 {
		args = append(args, "--max-kl", strconv.FormatFloat(o.MaxKL, 'g', -1, 64))
	}
	out, err := pyHostRun{Python: o.Python, Module: "kvbench.splicequality", Args: append(args, o.Args...), Stderr: o.Stderr,
		// Every arm's branch sits on the device; pages of finished arms are
		// evicted, never written elsewhere.
		Rig: RigOptions{PageSize: 16, DevicePages: 1280, Adjust: func(c *config.Config) {
			c.Index.SinkTokens = 0
			c.Index.WritePolicy = "none"
		}}}.run(ctx)
	if err != nil {
		return nil, err
	}
	return parseSpliceQuality(out)
}

func parseSpliceQuality(b []byte) (*SpliceQualityReport, error) {
	var r SpliceQualityReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the Python side printed no report JSON (%d bytes): %w", len(b), err)
	}
	if err := json.Unmarshal(b, &r.Extra); err != nil {
		return nil, err
	}
	if r.Scenario != "splice-quality" {
		return nil, fmt.Errorf("the Python side reported scenario %q, not splice-quality", r.Scenario)
	}
	for _, a := range spliceQualityArms {
		if _, ok := r.Arms[a]; !ok {
			return nil, fmt.Errorf("the Python side's report has no %s arm", a)
		}
	}
	return &r, nil
}

// MarshalJSON writes the report back as the child printed it.
func (r *SpliceQualityReport) MarshalJSON() ([]byte, error) { return json.Marshal(r.Extra) }

// WriteTable prints the arms, the guard's curve and the targets.
func (r *SpliceQualityReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(k string) any { return r.Params[k] }
	fmt.Fprintf(tw, "splice-quality: %v (%v), %v cases from %v sessions (%v), %v tokens scored against a re-prefill\n\n",
		p("model"), p("dtype"), p("cases"), p("sessions"), p("kinds"), p("scored_tokens"))
	fmt.Fprintf(tw, "arm\tmean KL\tworst KL\ttop-1\tfirst token\tppl ratio\trecomputed\n")
	for _, name := range spliceQualityArms {
		a := r.Arms[name]
		share := "-"
		if a.RecomputedShare != nil {
			share = fmt.Sprintf("%.1f%%", 100**a.RecomputedShare)
		}
		fmt.Fprintf(tw, "%s\t%.4f\t%.3f\t%.1f%%\t%.1f%%\t%.4f\t%s\n", name, a.KLMean, a.KLMax, 100*a.Top1, 100*a.FirstTop1, a.PPLRatio, share)
	}
	fmt.Fprintf(tw, "\ncurves (recomputed share: mean KL)\n")
	for _, m := range r.curveNames() {
		var pts []string
		for _, pt := range r.Curves[m] {
			pts = append(pts, fmt.Sprintf("%.0f%%: %.4f", 100*pt.RecomputedShare, pt.KLMean))
		}
		fmt.Fprintf(tw, "  %s\t%s\n", m, strings.Join(pts, ", "))
	}
	fmt.Fprintf(tw, "\ncontrol max |logit diff| %g; layer-0 rotation checked on %d cases, %d failures\n",
		r.Checks.ControlMaxAbsLogitDiff, r.Checks.RotationCases, len(r.Checks.RotationFailures))
	fmt.Fprintf(tw, "guard saves %.1f%% of the re-prefill (target >= 70%%, mean KL <= 0.008, top-1 >= 97%%): %v; curve a third below CacheBlend's at <= 20%%: %v; met=%v\n",
		100*r.Targets.GuardSaved, r.Targets.GuardMet, r.Targets.CurveMet, r.Targets.Met)
	return tw.Flush()
}

func (r *SpliceQualityReport) curveNames() []string {
	names := make([]string, 0, len(r.Curves))
	for m := range r.Curves {
		names = append(names, m)
	}
	sort.Strings(names)
	return names
}

// Charts: mean KL against the share recomputed, one curve per method.
func (r *SpliceQualityReport) Charts() []Chart {
	c := Chart{Title: "KL against a re-prefill", Unit: "mean per token", XUnit: "share of the edited region recomputed"}
	for _, m := range r.curveNames() {
		s := Series{Name: m}
		for _, pt := range r.Curves[m] {
			s.Points = append(s.Points, Point{X: pt.RecomputedShare, Y: pt.KLMean, Label: pt.Point})
		}
		c.Series = append(c.Series, s)
	}
	return []Chart{c}
}
