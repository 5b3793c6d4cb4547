package daemon

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/engineclient"
)

// scrape reads /metrics as text: each sample's value by its line's name
// and labels, as exposed (labels sorted by name).
func scrape(t *testing.T, d *Daemon) map[string]float64 {
	t.Helper()
	code, body := get(t, "http://"+d.HTTPAddr()+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		got[line[:i]] = v
	}
	return got
}

// sum adds the samples of name whose labels contain every one of want.
func sum(m map[string]float64, name string, want ...string) float64 {
	total := 0.0
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(k, w)
		}
		if ok {
			total += v
		}
	}
	return total
}

// Real engine traffic on a real host moves every metric an operator
// graphs: tokens matched, loaded back and prefilled (a hit rate), the
// load-back's latency, copies between tiers by pair, pinned bytes per
// tier, engine calls by outcome. Read back from /metrics.
func TestMetricsFollowEngineTraffic(t *testing.T) {
	c := modelConfig(t)
	c.HTTP.Listen = "127.0.0.1:0"
	d := startWithEngine(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := engineclient.Dial(ctx, engineclient.Options{Socket: c.EngineSocket(), EngineID: "test", Layout: tinyLayout(), Rope: engineclient.RopeConfig{Base: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	prompt := func(base, pages int) []uint32 {
		toks := make([]uint32, 4*pages)
		for i := range toks {
			toks[i] = uint32(base + i)
		}
		return toks
	}
	vip, other := prompt(1000, 2), prompt(2000, 3)
	engineTurn(t, cl, vip, `{"nvext":{"cache_control":{"type":"ephemeral","ttl":"5m"}}}`) // 8 prefilled, pinned
	engineTurn(t, cl, other, "")                                                          // 12 prefilled
	// Flood the 8-page device tier until other's pages have left it, then
	// match other again: its pages come back from the host tier.
	var loaded engineclient.MatchResult
	for i := 0; i < 20 && loaded.LoadedPages == 0; i++ {
		engineTurn(t, cl, prompt(10000+100*i, 4), "")
		time.Sleep(3 * c.Mover.StepInterval) // write-through of the flood's pages
		loaded = engineTurn(t, cl, other, "")
	}
	if loaded.LoadedPages == 0 {
		t.Fatal("no Match loaded pages back: the test did not exercise a load-back")
	}
	if _, err := cl.Match(ctx, engineclient.MatchRequest{Session: "bad\x00name", Tokens: vip}); err == nil {
		t.Fatal("a Match with an unprintable session was served")
	}

	m := scrape(t, d)
	matched := sum(m, "kvpilot_engine_tokens_total", `kind="matched"`)
	prefilled := sum(m, "kvpilot_engine_tokens_total", `kind="prefilled"`)
	if matched <= 0 || prefilled < 8+12 || sum(m, "kvpilot_engine_tokens_total", `kind="loaded"`) < float64(4*loaded.LoadedPages) {
		t.Errorf("tokens: matched %v, prefilled %v, loaded %v (last load-back %d pages)", matched, prefilled,
			sum(m, "kvpilot_engine_tokens_total", `kind="loaded"`), loaded.LoadedPages)
	}
	if n := m["kvpilot_engine_load_back_duration_seconds_count"]; n < 1 {
		t.Errorf("load-back latency observed %v times", n)
	}
	if b := sum(m, "kvpilot_transfer_bytes_total", `from="device"`, `to="host"`); b <= 0 {
		t.Errorf("no device->host bytes counted (write-through): %v", b)
	}
	if b := sum(m, "kvpilot_transfer_bytes_total", `from="host"`, `to="device"`); b < float64(loaded.LoadedBytes) {
		t.Errorf("host->device bytes %v, below the last load-back's %d", b, loaded.LoadedBytes)
	}
	if n := sum(m, "kvpilot_transfer_duration_seconds_count", `from="host"`, `to="device"`); n < float64(loaded.LoadedPages) {
		t.Errorf("host->device copies timed %v, want >= %d", n, loaded.LoadedPages)
	}
	pageBytes := float64(d.BytesPerPage())
	if pb, pp := sum(m, "kvpilot_pinned_bytes"), sum(m, "kvpilot_pinned_blocks"); pp < 2 || pb != pp*pageBytes {
		t.Errorf("pinned: %v bytes for %v pages of %v bytes", pb, pp, pageBytes)
	}
	calls := sum(m, "kvpilot_engine_requests_total", `call="Match"`, `outcome="ok"`)
	if calls < 3 || m[`kvpilot_engine_requests_total{call="Match",outcome="bad_request"}`] != 1 ||
		sum(m, "kvpilot_engine_requests_total", `call="Commit"`, `outcome="ok"`) < 3 {
		t.Errorf("engine calls: %v", filter(m, "kvpilot_engine_requests_total"))
	}
	// The engine's cache_control pin is a directive like any door's.
	if n := m[`kvpilot_directives_total{result="ok",verb="pin_prefix"}`]; n < 1 {
		t.Errorf("the engine's pin is not counted: %v", filter(m, "kvpilot_directives_total"))
	}
	if n := m[`kvpilot_directive_duration_seconds_count{verb="pin_prefix"}`]; n < 1 {
		t.Errorf("the engine's pin is not timed: %v", filter(m, "kvpilot_directive_duration_seconds_count"))
	}
}

func filter(m map[string]float64, prefix string) string {
	var b strings.Builder
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			fmt.Fprintf(&b, "%s %v\n", k, v)
		}
	}
	return b.String()
}
