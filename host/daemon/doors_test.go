package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/gateway"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// One pin and one refused pin through each door of a running host (the
// Control socket, NATS, the policy sink, the front door's directives) and
// the engine's cache_control pin at Finish: every one is counted in
// kvpilot_directives_total with its latency, the refusals as pin
// rejections, and every one leaves an audit record under its door's
// source. They all go through the host's one ingress.
func TestEveryDoorCountsAndAuditsAlike(t *testing.T) {
	c := modelConfig(t)
	d := startWithEngine(t, c)
	tr := dialTransports(t, d, "doors")
	h, _ := commitPages(t, d, "acme", []uint32{1, 2, 3, 4, 5, 6, 7, 8})
	pin := directive.Turn{Tenant: "acme", Directives: []directive.Directive{
		directive.Cache{BlockHashes: isoHashes(h.Sequence...), Pin: true, TTL: directive.TTLOf(time.Hour)}}}
	unknown := directive.Turn{Tenant: "acme", Directives: []directive.Directive{
		directive.Cache{BlockHashes: isoHashes(0xdead), Pin: true, TTL: directive.TTLOf(time.Hour)}}}
	for _, door := range directiveDoors(t, d, tr) {
		before := scrape(t, d)
		if r := door.apply(pin); r.Status != directive.StatusOK {
			t.Fatalf("%s: pin refused: %+v", door.name, r)
		}
		if r := door.apply(unknown); r.Status == directive.StatusOK {
			t.Fatalf("%s: a pin of an unknown block applied", door.name)
		}
		after := scrape(t, d)
		delta := func(key string) float64 { return after[key] - before[key] }
		if n := delta(`kvpilot_directives_total{result="ok",verb="Cache"}`); n != 1 {
			t.Errorf("%s: %v applied pins counted, want 1", door.name, n)
		}
		if n := delta(`kvpilot_directives_total{result="unknown_block",verb="Cache"}`); n != 1 {
			t.Errorf("%s: %v refused pins counted, want 1", door.name, n)
		}
		if n := delta(`kvpilot_pin_rejections_total{reason="unknown"}`); n != 1 {
			t.Errorf("%s: %v pin rejections counted, want 1", door.name, n)
		}
		if n := delta(`kvpilot_directive_duration_seconds_count{verb="Cache"}`); n != 2 {
			t.Errorf("%s: %v latencies observed, want 2", door.name, n)
		}
		auditedBoth(t, d, c.DataDir, door.name, door.source, string(directive.VerbCache))
	}

	// The engine's door: Finish with cache_control pins the prompt.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := engineclient.Dial(ctx, engineclient.Options{Socket: c.EngineSocket(), EngineID: "doors", Layout: tinyLayout(), Rope: engineclient.RopeConfig{Base: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	before := scrape(t, d)
	engineTurn(t, cl, []uint32{50, 51, 52, 53, 54, 55, 56, 57}, `{"nvext":{"cache_control":{"type":"ephemeral","ttl":"5m"}}}`)
	after := scrape(t, d)
	if n := after[`kvpilot_directives_total{result="ok",verb="pin_prefix"}`] - before[`kvpilot_directives_total{result="ok",verb="pin_prefix"}`]; n != 1 {
		t.Errorf("engine: %v pins counted, want 1", n)
	}
	if n := after[`kvpilot_directive_duration_seconds_count{verb="pin_prefix"}`] - before[`kvpilot_directive_duration_seconds_count{verb="pin_prefix"}`]; n != 1 {
		t.Errorf("engine: %v latencies observed, want 1", n)
	}
	recs := auditRecords(t, d, c.DataDir)
	if !has(recs, func(r executor.Record) bool {
		return strings.HasPrefix(r.Source, "engine:") && r.Verb == "pin_prefix" && r.Status == directive.StatusOK
	}) {
		t.Errorf("engine: the pin is not audited: %+v", recs)
	}
}

// door is one way a directive turn reaches the host, as a test sends it.
type door struct {
	name, source string
	apply        func(directive.Turn) directive.TurnReply
}

// directiveDoors are the doors a turn can take into d (the Control socket,
// NATS, the policy sink and the front door's directives), each naming the
// source its records carry (a prefix of it).
func directiveDoors(t *testing.T, d *Daemon, tr transports) []door {
	gate := gateway.IngressDirectives{In: d.core.in}
	return []door{
		{"socket", "uds:uid=", func(turn directive.Turn) directive.TurnReply { return tr.apply(t, "uds", turn) }},
		{"nats", "nats:" + tr.source, func(turn directive.Turn) directive.TurnReply { return tr.apply(t, "nats", turn) }},
		{"policy", "policy:test", func(turn directive.Turn) directive.TurnReply { return tr.apply(t, "policy", turn) }},
		{"gateway", gateway.Source, func(turn directive.Turn) directive.TurnReply {
			return gate.Submit(context.Background(), turn.Tenant, turn.Directives)
		}},
	}
}

// auditedBoth checks that door left an applied and a refused record of
// verb under a source starting with source.
func auditedBoth(t *testing.T, d *Daemon, dataDir, door, source, verb string) {
	t.Helper()
	recs := auditRecords(t, d, dataDir)
	ok := has(recs, func(r executor.Record) bool {
		return strings.HasPrefix(r.Source, source) && r.Verb == verb && r.Status == directive.StatusOK
	})
	refused := has(recs, func(r executor.Record) bool {
		return strings.HasPrefix(r.Source, source) && r.Verb == verb && r.Code == errcode.UnknownBlock
	})
	if !ok || !refused {
		t.Errorf("%s: audited applied %v, refused %v, under %q: %+v", door, ok, refused, source, recs)
	}
}

func auditRecords(t *testing.T, d *Daemon, dataDir string) []executor.Record {
	t.Helper()
	d.core.audit.Flush()
	recs, err := executor.ReadAuditFile(filepath.Join(dataDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func has(recs []executor.Record, match func(executor.Record) bool) bool {
	for _, r := range recs {
		if match(r) {
			return true
		}
	}
	return false
}
