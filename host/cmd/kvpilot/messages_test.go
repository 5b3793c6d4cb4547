package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/host/bench/controlhost"
	"github.com/kvpilot/kvpilot/sdk/errcode/errcodetest"
)

// Every error the CLI prints reads once: one registry code, no registry
// message twice, no Go type. The walk covers each kind of failure the
// commands have: argument mistakes, configuration refusals (file and
// environment), a missing host, bad JSON to apply and cache-control, and
// a real host's refusals of each verb, as text and as JSON.
func TestEveryErrorTheCLIPrintsReadsOnce(t *testing.T) {
	t.Setenv("KVPILOT_CONFIG", "")
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(what []string, code int, out, errs string) {
		t.Helper()
		text := out + errs
		if code == 0 || strings.TrimSpace(text) == "" {
			t.Errorf("%q: status %d, printed %q; want a failure that says why", what, code, text)
			return
		}
		if p := errcodetest.Problems(text); len(p) > 0 {
			t.Errorf("%q printed %q: %s", what, text, strings.Join(p, "; "))
		}
	}
	nohost := filepath.Join(dir, "no-host.sock")
	for _, c := range argumentMistakes {
		args := c.args
		if args[0] == "ctl" {
			args = append([]string{"ctl", "--socket", nohost}, args[1:]...)
		}
		code, out, errs := runCLI(args...)
		check(args, code, out, errs)
	}
	for _, y := range []string{
		"foo: 1\n", "tiers: {device: {capcity_pages: 3}}\n", "index: {page_size: lots}\n", "index: {auto_splice: maybe}\n",
		"index: 5\n", "pins: {default_ttl: soon}\n", "worker_id: -3\n", "index: [\n", "index: {page_size: 0}\n",
		"policies:\n  - {name: a, builtin: truncation, params: {keep: 3}}\n", "policies:\n  - {name: a, builtin: nosuch}\n",
	} {
		args := []string{"serve", "--check", "--config", file("bad.yaml", y)}
		code, out, errs := runCLI(args...)
		check(args, code, out, errs)
	}
	for _, env := range []string{"KVPILOT_FOO", "KVPILOT_INDEX__PAGE_SIZE", "KVPILOT_WORKER_ID"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "-lots")
			code, out, errs := runCLI("serve", "--check")
			check([]string{env, "serve", "--check"}, code, out, errs)
		})
	}
	code, out, errs := runCLI("ctl", "--socket", nohost, "stats")
	check([]string{"ctl", "stats", "(no host)"}, code, out, errs)

	h, err := controlhost.Start(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	for _, args := range [][]string{
		{"cache", "1"}, {"pin", "--session", "nope", "--end", "64"}, {"pause", "--lease", "l", "1"},
		{"renew", "nope", "5m"}, {"revoke", "nope"}, {"resume", "nope"}, {"prune", "1"}, {"warm", "--tier", "weird", "1"},
		{"splice", "--session", "nope", "--start", "0", "--end", "4", "--text", "x"},
		{"evict", "--session", "nope", "--start", "4", "--end", "0"},
		{"retain", "--session", "nope", "--end", "64", "--priority", "500"},
		{"share", "--session", "nope", "--end", "64", "--scope", "weird"},
		{"pin-blocks", "1"}, {"evict-descendants", "1"}, {"pin-prefix", "0..10"},
		{"apply", file("types.json", `{"type":"Cache","block_hashes":"x"}`)},
		{"apply", file("ttl.json", `{"type":"Cache","block_hashes":[1],"pin":true,"ttl_seconds":"soon"}`)},
		{"apply", file("verb.json", `{"type":"Frobnicate"}`)},
		{"apply", file("field.json", `{"type":"Cache","block_hashes":[1],"colour":"red"}`)},
		{"apply", file("trunc.json", `{"type":"Cache","block_hashes":[1`)},
		{"apply", file("list.json", `{"directives":{"type":"Cache"}}`)},
		{"cache-control", file("cc-ttl.json", `{"action":"pin_prefix","token_ids":[1,2],"ttl_seconds":"soon"}`)},
		{"cache-control", file("cc-action.json", `{"action":"pin_everything","token_ids":[1]}`)},
		{"cache-control", file("cc-types.json", `{"action":"pin_prefix","token_ids":"1,2"}`)},
	} {
		for _, mode := range [][]string{nil, {"--json"}} {
			full := append(append([]string{"ctl", "--socket", h.Socket}, mode...), args...)
			code, out, errs := runCLI(full...)
			check(full, code, out, errs)
		}
	}
}
