package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/kvpilot/kvpilot/host/config"
)

// The real-model scenario measures a real transformer's
// forward pass on this CPU: SmolLM2-135M-Instruct, a trained model, unless
// Model names one of the random-weight models. The model runs in Python
// (kvpilot.torchengine in sdk/python, on Hugging Face transformers;
// kvbench.realmodel in host/bench/python drives it); this side starts a real host
// in this process and runs the Python side as a child against its sockets,
// so the bytes of every cached page cross the same memfd pools and engine
// protocol an engine in production uses.

// RealModelOptions shape a real-model run.
type RealModelOptions struct {
	// Python runs the child; empty: $KVPILOT_PYTHON, else .venv/bin/python
	// in the working directory or a parent, else python3.
	Python string
	// Traces is the agent traces directory the prompt is built from.
	Traces string
	// Tokens is the prompt's approximate length; Model the model
	// (empty: SmolLM2-135M-Instruct).
	Tokens int
	Model  string
	// PageSize is the host's and the engine's page size.
	PageSize int
	// Args are passed to the child as they are.
	Args []string
	// Stderr receives the child's and the host's logs; nil discards them.
	Stderr io.Writer
}

// RealModelArm is one arm's measurement; fields that do not apply are 0.
type RealModelArm struct {
	TTFTms        float64 `json:"ttft_ms"`
	PromptTokens  int     `json:"prompt_tokens,omitempty"`
	CachedTokens  int     `json:"cached_tokens,omitempty"`
	PrefillTokens int     `json:"prefill_tokens,omitempty"`
}

// RealModelReport is the scenario's JSON, as the Python side prints it.
type RealModelReport struct {
	Scenario string                  `json:"scenario"`
	Params   map[string]any          `json:"params"`
	Arms     map[string]RealModelArm `json:"arms"`
	Checks   struct {
		PrefixMaxAbsLogitDiff float64 `json:"prefix_max_abs_logit_diff"`
		// PrefixLogitRelDiff is the largest logit difference over the
		// logits' largest magnitude (kvpilot.torchengine.logits).
		PrefixLogitRelDiff float64 `json:"prefix_logit_rel_diff"`
		PrefixTop1Equal    bool    `json:"prefix_top1_equal"`
		SpliceLayer0KeysOK bool    `json:"splice_layer0_keys_ok"`
		// SpliceVsReprefill is what the splice costs the model's next
		// token against a re-prefill (reported, not a target).
		SpliceVsReprefill struct {
			Top1Equal bool    `json:"top1_equal"`
			KL        float64 `json:"kl"`
		} `json:"splice_vs_reprefill"`
	} `json:"checks"`
	Targets struct {
		Met bool `json:"met"`
	} `json:"targets"`
	// Extra is the whole report as the child printed it (ratios, notes).
	Extra map[string]json.RawMessage `json:"-"`
}

// The arms, in the order the table shows them.
var realModelArms = []string{"full_prefill", "kvpilot_prefix", "reprefill_edit", "kvpilot_splice"}

// realModelDriver is the benchmark's Python side (host/bench/python).
const realModelDriver = "kvbench.realmodel"

// RunRealModel starts a host with a temporary data directory, runs the
// Python side against it and returns its report.
func RunRealModel(ctx context.Context, o RealModelOptions) (*RealModelReport, error) {
	if o.PageSize <= 0 {
		o.PageSize = 16
	}
	args := []string{"--page-size", strconv.Itoa(o.PageSize)}
	if o.Traces != "" {
		args = append(args, "--traces", o.Traces)
	}
	if o.Tokens > 0 {
		args = append(args, "--tokens", strconv.Itoa(o.Tokens))
	}
	if o.Model != "" {
		args = append(args, "--model", o.Model)
	}
	out, err := pyHostRun{Python: o.Python, Module: realModelDriver, Args: append(args, o.Args...), Stderr: o.Stderr,
		Rig: RigOptions{PageSize: o.PageSize, DevicePages: 2048, HostPages: 4096,
			Adjust: func(c *config.Config) { c.Index.SinkTokens = 0 }}}.run(ctx)
	if err != nil {
		return nil, err
	}
	return parseRealModel(out)
}

func parseRealModel(b []byte) (*RealModelReport, error) {
	var r RealModelReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the Python side printed no report JSON (%d bytes): %w", len(b), err)
	}
	if err := json.Unmarshal(b, &r.Extra); err != nil {
		return nil, err
	}
	if r.Scenario != "real-model" {
		return nil, fmt.Errorf("the Python side reported scenario %q, not real-model", r.Scenario)
	}
	for _, a := range realModelArms {
		if _, ok := r.Arms[a]; !ok {
			return nil, fmt.Errorf("the Python side's report has no %s arm", a)
		}
	}
	return &r, nil
}

// MarshalJSON writes the report back as the child printed it: every field
// it sent, nested ones included (the typed fields are a read-only view).
func (r *RealModelReport) MarshalJSON() ([]byte, error) { return json.Marshal(r.Extra) }

// WriteTable prints the arms and the checks.
func (r *RealModelReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(k string) any { return r.Params[k] }
	fmt.Fprintf(tw, "real-model: %v (%v, hidden %v, %v layers, %v), a %v-token prompt from %v; page %v; wall clock on this CPU\n\n",
		p("model"), p("architecture"), p("hidden"), p("layers"), p("dtype"), p("tokens"), p("trace"), p("page_size"))
	fmt.Fprintf(tw, "arm\tTTFT ms\tprompt\tcached\tprefilled\n")
	for _, name := range realModelArms {
		a := r.Arms[name]
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%d\t%d\n", name, a.TTFTms, a.PromptTokens, a.CachedTokens, a.PrefillTokens)
	}
	full, pre := r.Arms["full_prefill"], r.Arms["kvpilot_prefix"]
	re, sp := r.Arms["reprefill_edit"], r.Arms["kvpilot_splice"]
	fmt.Fprintf(tw, "\nprefix TTFT %.3fx of full prefill (target <= 0.25); splice prefills %.1f%% of re-prefill (target <= 20%%)\n",
		share(pre.TTFTms, full.TTFTms), 100*share(float64(sp.PrefillTokens), float64(re.PrefillTokens)))
	c := r.Checks
	fmt.Fprintf(tw, "prefix logits: max |diff| %.2e, %.2e of their scale (target <= 1e-5), same greedy token: %v; splice layer-0 keys exact: %v; met=%v\n",
		c.PrefixMaxAbsLogitDiff, c.PrefixLogitRelDiff, c.PrefixTop1Equal, c.SpliceLayer0KeysOK, r.Targets.Met)
	fmt.Fprintf(tw, "splice vs re-prefill, the next token (reported): same greedy token: %v, KL %.2e\n",
		c.SpliceVsReprefill.Top1Equal, c.SpliceVsReprefill.KL)
	return tw.Flush()
}

// share is a/b, 0 when b is.
func share(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Charts: TTFT and prefilled tokens per arm.
func (r *RealModelReport) Charts() []Chart {
	var ttft, prefill []Bar
	for _, name := range realModelArms {
		a := r.Arms[name]
		ttft = append(ttft, Bar{name, a.TTFTms})
		n := a.PrefillTokens
		if n == 0 {
			n = a.PromptTokens - a.CachedTokens
		}
		prefill = append(prefill, Bar{name, float64(n)})
	}
	return []Chart{
		{Title: "time to first token", Unit: "ms, wall clock", Bars: ttft},
		{Title: "tokens prefilled", Unit: "tokens", Bars: prefill},
	}
}
