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
	"time"
)

// The vllm scenario measures vLLM's CPU build with and without the kvpilot
// connector, on kvpilot hosts the Python side starts itself (it restarts
// one with SIGTERM between two processes): host/bench/python/kvbench/vllm
// says what each arm is.

// VLLMBenchOptions shape a run of the vllm scenario (StartVLLM, beside it,
// serves one vLLM for the demo).
type VLLMBenchOptions struct {
	// Python runs the child (see FindPython); Kvpilot is the binary the
	// child's hosts run.
	Python, Kvpilot string
	// Models to run (the Python side's names); empty: all.
	Models []string
	// Tokens per prompt and measured rounds; 0: the Python side's default.
	Tokens, Rounds int
	// Workdir keeps the hosts' data and the vLLM logs; empty: a temp dir.
	Workdir string
	// Stderr receives the child's progress; nil discards it.
	Stderr io.Writer
}

// VLLMArm is one arm's wall-clock time to first token across rounds.
type VLLMArm struct {
	Median       float64 `json:"ms_median"`
	Min          float64 `json:"ms_min"`
	Max          float64 `json:"ms_max"`
	CachedTokens []int   `json:"cached_tokens"`
}

// VLLMRatio is a ratio of two arms taken per round.
type VLLMRatio struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// VLLMModel is one model's part of the report.
type VLLMModel struct {
	Params  map[string]any       `json:"params"`
	Arms    map[string]VLLMArm   `json:"arms"`
	Ratios  map[string]VLLMRatio `json:"ratios"`
	Targets struct {
		Limits map[string]float64 `json:"limits"`
		Checks map[string]bool    `json:"checks"`
		Met    bool               `json:"met"`
	} `json:"targets"`
}

// VLLMReport is the scenario's JSON, as the Python side prints it.
type VLLMReport struct {
	Scenario string               `json:"scenario"`
	Params   map[string]any       `json:"params"`
	Models   map[string]VLLMModel `json:"models"`
	Targets  struct {
		Met bool `json:"met"`
	} `json:"targets"`
	raw json.RawMessage
}

// vllmDriver is the Python module the scenario runs with -m.
const vllmDriver = "kvbench.vllm"

// The arms, in the order the table shows them.
var vllmArms = []string{"no_connector_miss", "connector_miss", "connector_hit_fresh_process", "vllm_prefix_hit", "connector_hit_after_restart"}

// RunVLLM runs the Python side and returns its report.
func RunVLLM(ctx context.Context, o VLLMBenchOptions) (*VLLMReport, error) {
	py, err := FindPython(o.Python)
	if err != nil {
		return nil, err
	}
	args := []string{"--kvpilot", o.Kvpilot}
	if len(o.Models) > 0 {
		args = append(args, "--models", strings.Join(o.Models, ","))
	}
	if o.Tokens > 0 {
		args = append(args, "--tokens", strconv.Itoa(o.Tokens))
	}
	if o.Rounds > 0 {
		args = append(args, "--rounds", strconv.Itoa(o.Rounds))
	}
	if o.Workdir != "" {
		args = append(args, "--workdir", o.Workdir)
	}
	// The child stops its hosts and vLLM processes on SIGTERM; they may
	// take a while.
	out, err := runDriver(ctx, py, vllmDriver, args, o.Stderr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	return parseVLLM(out)
}

func parseVLLM(b []byte) (*VLLMReport, error) {
	var r VLLMReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the Python side printed no report JSON (%d bytes): %w", len(b), err)
	}
	if r.Scenario != "vllm" {
		return nil, fmt.Errorf("the Python side reported scenario %q, not vllm", r.Scenario)
	}
	if len(r.Models) == 0 {
		return nil, fmt.Errorf("the Python side's report has no model")
	}
	for name, m := range r.Models {
		for _, a := range vllmArms {
			if _, ok := m.Arms[a]; !ok {
				return nil, fmt.Errorf("the Python side's report of %s has no %s arm", name, a)
			}
		}
	}
	r.raw = append(json.RawMessage(nil), b...)
	return &r, nil
}

// MarshalJSON writes the report back as the child printed it.
func (r *VLLMReport) MarshalJSON() ([]byte, error) { return r.raw, nil }

func (r *VLLMReport) modelNames() []string {
	names := make([]string, 0, len(r.Models))
	for n := range r.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WriteTable prints each model's arms, ratios and targets.
func (r *VLLMReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, name := range r.modelNames() {
		m := r.Models[name]
		fmt.Fprintf(tw, "vllm: %s, a %v-token prompt, %v rounds; wall-clock time to first token on this CPU (median, min, max)\n\n",
			name, m.Params["tokens"], m.Params["rounds"])
		fmt.Fprintf(tw, "arm\tms\tmin\tmax\tcached tokens\n")
		for _, a := range vllmArms {
			x := m.Arms[a]
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%v\n", a, x.Median, x.Min, x.Max, x.CachedTokens)
		}
		fmt.Fprintf(tw, "\nratio\tmedian\tmin\tmax\ttarget\n")
		ratios := make([]string, 0, len(m.Ratios))
		for k := range m.Ratios {
			ratios = append(ratios, k)
		}
		sort.Strings(ratios)
		for _, k := range ratios {
			x, target := m.Ratios[k], "-"
			if lim, ok := m.Targets.Limits[k]; ok {
				target = fmt.Sprintf("<= %.2f", lim)
			}
			fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%s\n", k, x.Median, x.Min, x.Max, target)
		}
		fmt.Fprintf(tw, "checks: %v; met=%v\n\n", m.Targets.Checks, m.Targets.Met)
	}
	fmt.Fprintf(tw, "targets met: %v\n", r.Targets.Met)
	return tw.Flush()
}

// Charts: each model's arms.
func (r *VLLMReport) Charts() []Chart {
	var charts []Chart
	for _, name := range r.modelNames() {
		var bars []Bar
		for _, a := range vllmArms {
			bars = append(bars, Bar{a, r.Models[name].Arms[a].Median})
		}
		charts = append(charts, Chart{Title: "time to first token, " + name, Unit: "ms, median", Bars: bars})
	}
	return charts
}
