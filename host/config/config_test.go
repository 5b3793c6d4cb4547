package config

import (
	"errors"
	"github.com/kvpilot/kvpilot/host/layout"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvpilot.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsLoadAndValidate(t *testing.T) {
	c, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	if len(c.Policies) == 0 {
		c.Policies = want.Policies // nil and empty mean the same
	}
	if len(c.NATS.Users) == 0 {
		c.NATS.Users = want.NATS.Users
	}
	if len(c.Gateway.Tenants) == 0 {
		c.Gateway.Tenants = want.Gateway.Tenants
	}
	if len(c.Gateway.Policies) == 0 {
		c.Gateway.Policies = want.Gateway.Policies
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults changed on the way through koanf:\n got %+v\nwant %+v", c, Default())
	}
}

func TestFileThenEnvOverride(t *testing.T) {
	p := writeFile(t, `
worker_id: 7
pins:
  default_ttl: 5m
  max_ttl: 7200
tiers:
  device:
    capacity_pages: 100
`)
	c, err := Load(p, []string{"KVPILOT_TIERS__DEVICE__CAPACITY_PAGES=200", "KVPILOT_HTTP__LISTEN=", "KVPILOT_CONFIG=/ignored", "OTHER=1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.WorkerID != 7 || c.Pins.DefaultTTL != 5*time.Minute || c.Pins.MaxTTL != 2*time.Hour {
		t.Fatalf("file values not applied: %+v", c)
	}
	if c.Tiers.Device.CapacityPages != 200 {
		t.Fatalf("env did not override the file: %d", c.Tiers.Device.CapacityPages)
	}
	if c.HTTP.Listen != "" {
		t.Fatalf("env did not clear http.listen: %q", c.HTTP.Listen)
	}
	if c.Tiers.Host != Default().Tiers.Host {
		t.Fatal("untouched keys lost their defaults")
	}
}

// The variables kvpilot's own tools read (KVPILOT_CPU_KERNELS,
// KVPILOT_PYTHON, KVPILOT_TRACES, ...) are not keys: a shell that exports
// one, as the README's benchmarks suggest, still starts the host. Any
// other KVPILOT_ name is still refused.
func TestToolVariablesAreNotConfiguration(t *testing.T) {
	env := []string{"KVPILOT_CPU_KERNELS=generic", "KVPILOT_PYTHON=/usr/bin/python3", "KVPILOT_TRACES=/traces",
		"KVPILOT_POLICY_LOG_LEVEL=debug", "KVPILOT_BIN=/bin/kvpilot", "KVPILOT_WORKER_ID=3"}
	c, err := Load("", env)
	if err != nil || c.WorkerID != 3 {
		t.Fatalf("with the tools' variables set: %+v %v", c.WorkerID, err)
	}
	if _, err := Load("", append(env, "KVPILOT_TRACE=/typo")); err == nil || !strings.Contains(err.Error(), "trace") {
		t.Fatalf("a misspelt variable was accepted: %v", err)
	}
}

func TestInvalidNamesTheKey(t *testing.T) {
	for _, c := range []struct {
		name, file string
		env        []string
		key        string
	}{
		{"unknown key", "tiers:\n  device:\n    capcity_pages: 3\n", nil, "capcity_pages"},
		{"wrong type", "index:\n  page_size: lots\n", nil, "page_size"},
		{"not a bool", "index:\n  auto_splice: maybe\n", nil, "auto_splice"},
		{"bad ttl", "pins:\n  default_ttl: soon\n", nil, "default_ttl"},
		{"out of range", "index:\n  page_size: 0\n", nil, "index.page_size"},
		{"bad enum", "index:\n  write_policy: sometimes\n", nil, "index.write_policy"},
		{"watermarks", "tiers:\n  host:\n    low_watermark: 0.99\n    high_watermark: 0.5\n", nil, "tiers.host.low_watermark"},
		{"budget", "tiers:\n  disk:\n    pin_budget: 1.5\n", nil, "tiers.disk.pin_budget"},
		{"ttl clamps", "pins:\n  default_ttl: 10h\n  max_ttl: 1h\n", nil, "pins.default_ttl"},
		{"env typo", "", []string{"KVPILOT_INDEX__PAGESIZE=3"}, "pagesize"},
		{"env bad value", "", []string{"KVPILOT_LOG__LEVEL=loud"}, "log.level"},
		{"yaml syntax", "index: [\n", nil, "kvpilot.yaml"},
		{"policy without kind", "policies:\n  - name: a\n", nil, "policies[0].builtin"},
		{"policy both kinds", "policies:\n  - name: a\n    builtin: truncation\n    path: /x\n", nil, "policies[0].builtin"},
		{"policy no digest", "policies:\n  - name: a\n    path: /x\n", nil, "policies[0].sha256"},
		{"policy unknown builtin", "policies:\n  - {name: a, builtin: nosuch}\n", nil, "policies[0].builtin"},
		{"policy bad params", "policies:\n  - {name: a, builtin: truncation, params: {keep: 3}}\n", nil, "policies[0].params"},
		{"policy unknown param", "policies:\n  - {name: a, builtin: auto-pin, params: {nonsense: 1}}\n", nil, "policies[0].params"},
		{"policy dup", "policies:\n  - {name: a, builtin: truncation}\n  - {name: a, builtin: auto-pin}\n", nil, "policies[1].name"},
		{"negative worker", "worker_id: -3\n", nil, "worker_id"},
		{"negative worker env", "", []string{"KVPILOT_WORKER_ID=-3"}, "worker_id"},
		{"event format", "events:\n  format: protobuf\n", nil, "events.format"},
		{"event endpoint", "", []string{"KVPILOT_EVENTS__ENDPOINT=gen.x"}, "events.endpoint"},
		{"negative dp_rank env", "", []string{"KVPILOT_EVENTS__DP_RANK=-1"}, "dp_rank"},
		{"remote backend", "pools:\n  remote_backend: s3\n", nil, "pools.remote_backend"},
		{"redis without addrs", "pools:\n  remote_backend: redis\n", nil, "pools.remote_redis.addrs"},
		{"redis bad addr", "pools:\n  remote_backend: redis\n  remote_redis: {addrs: [localhost]}\n", nil, "pools.remote_redis.addrs[0]"},
		{"command replicas", "nats:\n  command_replicas: 7\n", nil, "nats.command_replicas"},
		{"recompute share", "splice:\n  recompute: {share: 1.5}\n", nil, "splice.recompute.share"},
		{"recompute first", "", []string{"KVPILOT_SPLICE__RECOMPUTE__FIRST=-2"}, "splice.recompute.first"},
		{"guard budget", "splice:\n  max_kl: -0.01\n", nil, "splice.max_kl"},
		{"tenant budget", "splice:\n  tenants: {acme: {max_kl: -1}}\n", nil, "splice.tenants.acme.max_kl"},
		{"tenant typo", "splice:\n  tenants: {acme: {maxkl: 1}}\n", nil, "maxkl"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := ""
			if c.file != "" {
				path = writeFile(t, c.file)
			}
			_, err := Load(path, c.env)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			if !strings.Contains(err.Error(), c.key) {
				t.Errorf("error does not name %q: %v", c.key, err)
			}
		})
	}
}

func TestPolicies(t *testing.T) {
	p := writeFile(t, `
policies:
  - name: trunc
    builtin: truncation
    params:
      keep: {type: tool_uses, value: 3}
      exclude_tools: [Read]
`)
	c, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policies) != 1 || c.Policies[0].Builtin != "truncation" || c.Policies[0].Params["keep"] == nil {
		t.Fatalf("policies: %+v", c.Policies)
	}
}

func TestMissingFile(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), nil); err == nil || !errors.Is(err, ErrInvalid) {
		t.Fatalf("missing file: %v", err)
	}
}

func FuzzLoadYAML(f *testing.F) {
	f.Add("worker_id: a\n")
	f.Add("tiers:\n  device:\n    capacity_pages: -1\n")
	f.Add("pins: {default_ttl: 1h, min_ttl: 0}\n")
	f.Add("[1, 2")
	f.Fuzz(func(t *testing.T, body string) {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(p, nil)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load returned a config that fails Validate: %v", err)
		}
	})
}

func TestModelLayout(t *testing.T) {
	p := writeFile(t, `
model:
  name: llama-mini
  attention: mha
  dtype: bf16
  layers: 2
  kv_heads: 2
  head_dim: 64
  rope_dim: 64
`)
	c, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, ok, err := c.Layout()
	if err != nil || !ok {
		t.Fatalf("layout: %v %v", ok, err)
	}
	// 64 tokens x 2 layers x (K+V) x 2 heads x 64 dims x 2 bytes.
	if got := l.PageBytes(); got != 64*2*2*2*64*2 {
		t.Fatalf("page bytes %d", got)
	}
	if _, ok, _ := Default().Layout(); ok {
		t.Fatal("defaults configure no model")
	}
	bad := writeFile(t, "model:\n  name: x\n  attention: mha\n  layers: 0\n")
	if _, err := Load(bad, nil); err == nil || !strings.Contains(err.Error(), "model") {
		t.Fatalf("invalid model accepted: %v", err)
	}
}

// The k_pe pairing of an MLA cache is the engine's to declare: DeepSeek-V2
// caches store it interleaved (the default), transformers' DeepSeek-V3 cache
// half-split.
func TestMLARopeStyleIsDeclared(t *testing.T) {
	for style, want := range map[string]layout.RopeStyle{"": layout.Interleaved, "interleaved": layout.Interleaved, "half_split": layout.HalfSplit} {
		p := writeFile(t, "model:\n  name: dsv3\n  attention: mla\n  dtype: bf16\n  layers: 2\n  kv_lora_rank: 64\n  rope_dim: 16\n  rope_style: \""+style+"\"\n")
		c, err := Load(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, _, err := c.Layout()
		if err != nil || l.Rope == nil || l.Rope.Style != want {
			t.Fatalf("rope_style %q: layout %+v, %v; want %v", style, l.Rope, err, want)
		}
	}
	bad := writeFile(t, "model:\n  name: dsv3\n  attention: mla\n  layers: 2\n  kv_lora_rank: 64\n  rope_dim: 16\n  rope_style: sideways\n")
	if _, err := Load(bad, nil); err == nil || !strings.Contains(err.Error(), "model.rope_style") {
		t.Fatalf("bad rope_style: %v", err)
	}
}

// The Dynamo worker's identity (instance id and rank) and the event format
// come from the environment as a Dynamo launcher would set them, and pick
// the subject Dynamo's router reads; the JSON format keeps the
// component's subject.
func TestDynamoIdentityFromEnvironment(t *testing.T) {
	c, err := Load("", []string{"KVPILOT_WORKER_ID=2769957934671139", "KVPILOT_EVENTS__DP_RANK=2",
		"KVPILOT_EVENTS__NAMESPACE=ns1", "KVPILOT_EVENTS__COMPONENT=comp1", "KVPILOT_EVENTS__ENDPOINT=gen"})
	if err != nil {
		t.Fatal(err)
	}
	if c.WorkerID != 2769957934671139 || c.Events.DPRank != 2 || c.Events.Format != EventsDynamo {
		t.Fatalf("worker_id %d dp_rank %d format %q", c.WorkerID, c.Events.DPRank, c.Events.Format)
	}
	if got := c.EventsSubject(); got != "namespace.ns1.component.comp1.endpoint.gen.kv-events" {
		t.Fatalf("dynamo subject %q", got)
	}
	c, err = Load("", []string{"KVPILOT_EVENTS__FORMAT=json"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.EventsSubject(); got != "namespace.dynamo.component.backend.kv-events" {
		t.Fatalf("json subject %q", got)
	}
}

// The front door is checked at load when it is on, each error naming its key.
func TestGatewayValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Gateway)
		key  string
	}{
		{"no upstream", func(g *Gateway) { g.Upstream = "" }, "gateway.upstream"},
		{"not http", func(g *Gateway) { g.Upstream = "unix:///tmp/x" }, "gateway.upstream"},
		{"no host", func(g *Gateway) { g.Upstream = "http:///v1" }, "gateway.upstream"},
		{"bad listen", func(g *Gateway) { g.Listen = "8080" }, "gateway.listen"},
		{"zero timeout", func(g *Gateway) { g.Timeout = 0 }, "gateway.timeout"},
		{"no sessions", func(g *Gateway) { g.MaxSessions = 0 }, "gateway.max_sessions"},
		{"empty binding", func(g *Gateway) { g.Tenants = map[string][]string{"k": nil} }, "gateway.tenants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Gateway.Listen, c.Gateway.Upstream = "127.0.0.1:8080", "http://127.0.0.1:8000/v1"
			if err := c.Validate(); err != nil {
				t.Fatalf("a valid gateway: %v", err)
			}
			tc.mod(&c.Gateway)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("got %v, want an error naming %s", err, tc.key)
			}
		})
	}
	c := Default()
	c.Gateway.Upstream = ""
	if err := c.Validate(); err != nil {
		t.Fatalf("the gateway is off by default and then not checked: %v", err)
	}
}

// A refused configuration reads in the operator's words: each key by its
// path, a key the environment set by the variable's name, what its value
// should be, and no Go type or decoder wording.
func TestRefusalsSpeakTheOperatorsWords(t *testing.T) {
	for _, c := range []struct {
		file string
		env  []string
		want string
	}{
		{"foo: 1\n", nil, "unknown key foo"},
		{"tiers:\n  device:\n    capcity_pages: 3\n", nil, "unknown key tiers.device.capcity_pages"},
		{"", []string{"KVPILOT_FOO=1"}, "unknown environment variable KVPILOT_FOO: no configuration key foo"},
		{"", []string{"KVPILOT_INDEX__PAGESIZE=3"}, "unknown environment variable KVPILOT_INDEX__PAGESIZE: no configuration key index.pagesize"},
		{"index:\n  page_size: lots\n", nil, `index.page_size: "lots" is not an integer`},
		{"", []string{"KVPILOT_INDEX__PAGE_SIZE=lots"}, `index.page_size (set by KVPILOT_INDEX__PAGE_SIZE): "lots" is not an integer`},
		{"index:\n  auto_splice: maybe\n", nil, `index.auto_splice: "maybe" is not true or false`},
		{"index: 5\n", nil, "index: want a mapping of keys to values"},
		{"control:\n  tenants: 5\n", nil, "control.tenants: want a mapping of keys to values, got an integer"},
		{"pins:\n  default_ttl: soon\n", nil, `pins.default_ttl: invalid ttl: "soon"`},
		{"policies:\n  - {name: a, builtin: truncation, params: {keep: 3}}\n", nil, `policies[0].params: truncation: params: field "keep": got a number, want an object`},
	} {
		path := ""
		if c.file != "" {
			path = writeFile(t, c.file)
		}
		_, err := Load(path, c.env)
		if err == nil {
			t.Errorf("%q %v: loaded", c.file, c.env)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%q %v:\n got %s\nwant %s", c.file, c.env, msg, c.want)
		}
		for _, bad := range []string{"config.Config", "'", "strconv.", "decoding failed", "Go struct", "truncation.Threshold"} {
			if strings.Contains(msg, bad) {
				t.Errorf("%q %v: %q says %q", c.file, c.env, msg, bad)
			}
		}
	}
}

// TestSpliceRulesPerTenant: a tenant's splice settings override the host's
// key by key.
func TestSpliceRulesPerTenant(t *testing.T) {
	path := writeFile(t, "splice:\n  recompute: {first: 64}\n  max_kl: 0.005\n  tenants:\n    acme: {recompute: {share: 0.2}}\n    bulk: {max_kl: 0, recompute: {first: 0}}\n")
	c, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]SpliceRule{
		"":      {First: 64, MaxKL: 0.005},
		"other": {First: 64, MaxKL: 0.005},
		"acme":  {First: 64, Share: 0.2, MaxKL: 0.005},
		"bulk":  {},
	} {
		if got := c.Splice.Explicit(tenant); got != want {
			t.Errorf("tenant %q: %+v, want %+v", tenant, got, want)
		}
	}
	if rules := c.Splice.Rules(); len(rules) != 3 || rules[2].Any() {
		t.Errorf("rules %+v: want the host's, acme's and bulk's (nothing)", rules)
	}
}
