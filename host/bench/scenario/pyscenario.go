package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/config"
)

// PyScenario is a scenario whose driver is written in Python (a kvbench
// module under host/bench/python) and runs as a child. The driver measures
// and writes the report; this side starts the host it measures against,
// hands it its flags, and carries its JSON through as it came, printed for
// people by the table writer every such report shares.
type PyScenario struct {
	// Name is the report's "scenario"; Module the driver (python -m).
	Name, Module string
	// Rig is the host the driver runs against, in this process (its
	// --engine-socket, --control-socket and --page-size are added to the
	// driver's flags), so every cached page crosses the memfd pools and the
	// engine protocol a deployment uses; nil: the driver starts its own.
	Rig *RigOptions
	// Grace is how long the driver may take to stop what it started once
	// told to (SIGTERM).
	Grace time.Duration
	// Sections are the members of the report its table shows, in order
	// (none: all).
	Sections []string
	// Charts draws the report for --plot.
	Charts func(report object) []Chart
}

// PyOptions shape one run of a PyScenario.
type PyOptions struct {
	// Python runs the driver; empty: FindPython's choice.
	Python string
	// Args are the driver's own flags, passed as they are.
	Args []string
	// PageSize is the host's and the driver's page size (0: 16), for a
	// driver run against a Rig.
	PageSize int
	// Stderr receives the driver's and the host's logs; nil discards them.
	Stderr io.Writer
}

// PyReport is a driver's report: its JSON, as printed.
type PyReport struct {
	raw json.RawMessage
	doc object
	s   *PyScenario
}

// Run starts the scenario's host (with a temporary data directory), runs
// the driver and reads its report.
func (s *PyScenario) Run(ctx context.Context, o PyOptions) (*PyReport, error) {
	py, err := FindPython(o.Python)
	if err != nil {
		return nil, err
	}
	args := o.Args
	if s.Rig != nil {
		ro := *s.Rig
		ro.PageSize, ro.HostOnly = cmp.Or(o.PageSize, 16), true
		if o.Stderr != nil {
			ro.Log = hclog.New(&hclog.LoggerOptions{Name: "host", Output: o.Stderr, Level: hclog.Warn})
		}
		rig, err := StartRig(ctx, ro)
		if err != nil {
			return nil, err
		}
		defer rig.Close()
		args = append([]string{"--engine-socket", rig.Config.EngineSocket(), "--control-socket", rig.Daemon.ControlSocket(),
			"--page-size", strconv.Itoa(ro.PageSize)}, args...)
	}
	out, err := runDriver(ctx, py, s.Module, args, o.Stderr, s.Grace)
	if err != nil {
		return nil, err
	}
	return s.parse(out)
}

// parse reads a driver's output: one JSON object, this scenario's, with
// targets.met (what --check reads).
func (s *PyScenario) parse(b []byte) (*PyReport, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return nil, fmt.Errorf("the Python side printed no report JSON (%d bytes): %w", len(b), err)
	}
	doc, _ := v.(object)
	if name := doc.get("scenario"); name != s.Name {
		return nil, fmt.Errorf("the Python side reported scenario %v, not %s", name, s.Name)
	}
	targets, _ := doc.get("targets").(object)
	if _, ok := targets.get("met").(bool); !ok {
		return nil, fmt.Errorf("the Python side's report has no targets.met (a true or false)")
	}
	return &PyReport{raw: b, doc: doc, s: s}, nil
}

// MarshalJSON writes the report as the driver printed it.
func (r *PyReport) MarshalJSON() ([]byte, error) { return r.raw, nil }

// WriteTable prints the scenario's sections of the report.
func (r *PyReport) WriteTable(w io.Writer) error { return writeSections(w, r.doc, r.s.Sections...) }

// Charts draws the scenario's charts of the report.
func (r *PyReport) Charts() []Chart { return r.s.Charts(r.doc) }

// RealModel measures a real transformer's forward pass on this CPU
// (kvbench.realmodel, on kvpilot.torchengine): SmolLM2-135M-Instruct, a
// trained model, unless its --model names a random-weight one; full
// prefill, the prefix from kvpilot, re-prefill after an edit, the splice.
var RealModel = &PyScenario{Name: "real-model", Module: "kvbench.realmodel", Grace: 5 * time.Second,
	Rig: &RigOptions{DevicePages: 2048, HostPages: 4096, Adjust: func(c *config.Config) {
		c.Index.SinkTokens = 0
		c.Splice = c.Splice.WithoutDefaults() // its splice arm is the plain splice
	}},
	Charts: func(r object) []Chart {
		return []Chart{
			{Title: "time to first token", Unit: "ms, wall clock", Bars: jsonBars(r.get("arms"), "ttft_ms")},
			{Title: "tokens prefilled", Unit: "tokens", Bars: jsonBars(r.get("arms"), "prefill_tokens")},
		}
	}}

// SpliceQuality measures what a splice costs the model's answers
// (kvbench.splicequality): real edits of real agent sessions on
// SmolLM2-135M-Instruct, the next assistant turn scored by teacher forcing
// against a re-prefill, for the plain splice, recompute and the quality
// guard (through the host) and the reference and baselines (in torch).
var SpliceQuality = &PyScenario{Name: "splice-quality", Module: "kvbench.splicequality", Grace: 5 * time.Second,
	// Every arm's branch sits on the device; pages of finished arms are
	// evicted, never written elsewhere.
	Rig: &RigOptions{DevicePages: 1280, Adjust: func(c *config.Config) {
		c.Index.SinkTokens = 0
		c.Index.WritePolicy = "none"
		c.Splice = c.Splice.WithoutDefaults() // each arm asks for its recompute
	}},
	// Its cases (every arm of every case) are in the JSON only.
	Sections: []string{"scenario", "params", "arms", "curves", "checks", "targets"},
	Charts: func(r object) []Chart {
		c := Chart{Title: "KL against a re-prefill", Unit: "mean per token", XUnit: "share of the edited region recomputed"}
		curves, _ := r.get("curves").(object)
		for _, m := range curves {
			s := Series{Name: m.key}
			points, _ := m.val.([]any)
			for _, p := range points {
				pt, _ := p.(object)
				s.Points = append(s.Points, Point{X: number(pt.get("recomputed_share")), Y: number(pt.get("kl_mean")), Label: format(pt.get("point"))})
			}
			c.Series = append(c.Series, s)
		}
		return []Chart{c}
	}}

// VLLM measures vLLM's CPU build with and without the kvpilot connector
// (kvbench.vllm, which says what each arm is), on kvpilot hosts the driver
// starts itself: it restarts one with SIGTERM between two processes. Its
// flags take the kvpilot binary those hosts run (--kvpilot).
var VLLM = &PyScenario{Name: "vllm", Module: "kvbench.vllm",
	// The driver stops its hosts and vLLM processes on SIGTERM; they may
	// take a while.
	Grace: 30 * time.Second,
	Charts: func(r object) []Chart {
		var charts []Chart
		models, _ := r.get("models").(object)
		for _, m := range models {
			model, _ := m.val.(object)
			charts = append(charts, Chart{Title: "time to first token, " + m.key, Unit: "ms, median", Bars: jsonBars(model.get("arms"), "ms_median")})
		}
		return charts
	}}

// jsonBars is a bar per member of rows (an object of objects, the arms),
// of its field.
func jsonBars(rows any, field string) []Bar {
	obj, _ := rows.(object)
	bars := make([]Bar, len(obj))
	for i, m := range obj {
		arm, _ := m.val.(object)
		bars[i] = Bar{m.key, number(arm.get(field))}
	}
	return bars
}
