// Package grafana holds a Grafana dashboard for a kvpilot host's /metrics;
// its test keeps the dashboard loadable and every query on a metric the
// host exports.
package grafana

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
)

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile("kvpilot-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("kvpilot-dashboard.json is not valid JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 || len(d.Panels) == 0 {
		t.Fatalf("dashboard lacks title, uid, schemaVersion or panels: %+v", d)
	}
	return d
}

// hostMetricNames starts a real host on its defaults and lists the names
// its registry describes (a vector with no samples yet is described, not
// gathered), histograms with their series suffixes.
func hostMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	c := config.Default()
	c.DataDir = t.TempDir()
	c.HTTP.Listen = "127.0.0.1:0"
	c.NATS.Listen = ""
	d, err := daemon.New(c, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("host did not stop within 10s")
		}
	}()
	ch := make(chan *prometheus.Desc)
	go func() { d.Metrics().Registry.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for desc := range ch {
		m := fq.FindStringSubmatch(desc.String())
		if m == nil {
			t.Fatalf("no name in %s", desc)
		}
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			names[m[1]+suffix] = true
		}
	}
	return names
}

var (
	// Label matchers, groupings, ranges and strings hold no metric names.
	matchers  = regexp.MustCompile(`\{[^}]*\}`)
	groupings = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	ranges    = regexp.MustCompile(`\[[^\]]*\]`)
	strs      = regexp.MustCompile(`"[^"]*"`)
	ident     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	keywords  = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}
)

// metricNames are the names a PromQL expression selects: identifiers
// that are neither functions, keywords nor labels.
func metricNames(expr string) []string {
	e := strs.ReplaceAllString(expr, "")
	e = matchers.ReplaceAllString(e, "")
	e = groupings.ReplaceAllString(e, "")
	e = ranges.ReplaceAllString(e, "")
	var out []string
	for _, m := range ident.FindAllString(e, -1) {
		if strings.HasSuffix(m, "(") || keywords[m] {
			continue
		}
		out = append(out, m)
	}
	return out
}

func TestMetricNamesOfAnExpression(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (le, verb) (rate(kvpilot_x_bucket{verb=~"a|b"}[$__rate_interval]))) / sum(kvpilot_y) and on (tier) kvpilot_z`)
	if strings.Join(got, " ") != "kvpilot_x_bucket kvpilot_y kvpilot_z" {
		t.Fatalf("metric names %q", got)
	}
}

// The dashboard loads as Grafana JSON and every query names only metrics
// a real host registers: a renamed metric breaks this test, not a graph.
func TestDashboardQueriesOnlyMetricsTheHostExports(t *testing.T) {
	d := load(t)
	known := hostMetricNames(t)
	queries := 0
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if p.GridPos == nil || p.Type == "" || p.Title == "" {
			t.Errorf("panel %d %q lacks type, title or gridPos", p.ID, p.Title)
		}
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d is missing or not unique (Grafana keys panels by id)", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		for _, tg := range p.Targets {
			names := metricNames(tg.Expr)
			if tg.RefID == "" || len(names) == 0 {
				t.Errorf("panel %q target %q: no refId or no metric in %q", p.Title, tg.RefID, tg.Expr)
			}
			for _, n := range names {
				if !known[n] {
					t.Errorf("panel %q queries %s, which the host does not export", p.Title, n)
				}
			}
			queries++
		}
	}
	for _, want := range []string{"kvpilot_engine_tokens_total", "kvpilot_engine_load_back_duration_seconds_bucket", "kvpilot_transfer_bytes_total",
		"kvpilot_transfer_failures_total", "kvpilot_pinned_bytes", "kvpilot_directive_duration_seconds_bucket", "kvpilot_rate_limited_total", "kvpilot_engine_requests_total"} {
		if !known[want] {
			t.Errorf("the host does not export %s", want)
		}
	}
	t.Logf("%d panels, %d queries checked against %d series names", len(d.Panels), queries, len(known))
}
