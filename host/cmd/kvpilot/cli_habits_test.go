package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/host/bench/controlhost"
	"github.com/kvpilot/kvpilot/host/config"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// The command follows its ecosystem's habits: asked-for help goes to stdout
// with status 0, there is a version command, bench lists its scenarios,
// and flags may follow the positional arguments.
func TestCLIHabits(t *testing.T) {
	benchOnPath(t) // bench is kvpilot-bench's, run through kvpilot
	for _, args := range [][]string{{"--help"}, {"hash", "--help"}, {"ctl", "--help"}, {"ctl", "cache", "--help"}, {"bench"}, {"bench", "rotate", "--help"}} {
		code, out, errs := runCLI(args...)
		if code != 0 || !strings.Contains(out, "Usage") || errs != "" {
			t.Errorf("%v: status %d, stdout %.60q, stderr %.60q", args, code, out, errs)
		}
	}
	if code, _, errs := runCLI("hash", "--no-such-flag", "1"); code != 2 || !strings.Contains(errs, "no-such-flag") {
		t.Errorf("unknown flag: status %d, stderr %q", code, errs)
	}
	code, out, _ := runCLI("version")
	if code != 0 || !strings.Contains(out, "kvpilot ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: %d %q", code, out)
	}
	_, before, _ := runCLI("hash", "--block-size", "32", "0..64")
	code, after, errs := runCLI("hash", "0..64", "--block-size", "32")
	var h struct{ Local []uint64 }
	if code != 0 || before != after || json.Unmarshal([]byte(after), &h) != nil || len(h.Local) != 2 {
		t.Errorf("flags after the arguments: %d %q %q (want %q)", code, after, errs, before)
	}
}

// ctl's own flags work after the verb, and a negative (signed) hash is an
// argument, not a flag.
func TestCtlFlagsAfterTheVerb(t *testing.T) {
	h, err := controlhost.Start(filepath.Join(t.TempDir(), "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	code, out, errs := runCLI("ctl", "stats", "--socket", h.Socket, "--json")
	if code != 0 || !json.Valid([]byte(out)) {
		t.Fatalf("ctl stats --socket S --json: %d %q %q", code, out, errs)
	}
	code, out, _ = runCLI("ctl", "cache", "-9143094415614847814", "--socket", h.Socket, "--ttl", "5m")
	if code != 1 || !strings.Contains(out, "unknown_block") {
		t.Fatalf("ctl cache with a signed hash: %d %q", code, out)
	}
}

// `kvpilot --version` is the version command, as in most CLIs.
func TestVersionFlag(t *testing.T) {
	code, out, errs := runCLI("--version")
	if code != 0 || !strings.HasPrefix(out, "kvpilot ") || !strings.Contains(out, runtime.Version()) || errs != "" {
		t.Fatalf("--version: %d %q %q", code, out, errs)
	}
}

// A mistake in a command's arguments is a usage error wherever it is
// found: status 2 (a refusal by the host is 1), a message naming the
// command, and where its usage is. Nothing is sent: no host runs here.
func TestArgumentMistakesExitTwo(t *testing.T) {
	t.Setenv("KVPILOT_CONFIG", "")
	sock := []string{"--socket", filepath.Join(t.TempDir(), "no-host.sock")}
	for _, c := range argumentMistakes {
		args := c.args
		if args[0] == "ctl" {
			args = append(append([]string{"ctl"}, sock...), args[1:]...)
		}
		code, out, errs := runCLI(args...)
		if code != 2 || out != "" || !strings.HasPrefix(errs, c.want) || !strings.Contains(errs, "--help' for its usage") {
			t.Errorf("%v: status %d, stdout %q, stderr %q; want status 2 and %q", c.args, code, out, errs, c.want)
		}
	}
}

// serve --check prints the configuration it would run with as YAML on
// stdout, one key a line, secrets hidden; fed back as a config file it
// gives the same configuration.
func TestServeCheckPrintsTheConfigurationAsYAML(t *testing.T) {
	t.Setenv("KVPILOT_CONFIG", "")
	dir := t.TempDir()
	in := filepath.Join(dir, "in.yaml")
	yaml := "index: {page_size: 32}\npins: {default_ttl: 90s}\n" +
		"gateway: {listen: 127.0.0.1:8080, upstream: http://127.0.0.1:8000/v1, upstream_api_key: sk-secret, tenants: {sk-tenant-key: [acme]}}\n" +
		"policies:\n  - {name: trunc, builtin: truncation, params: {older_than: 2, max_chars: 200}}\n"
	if err := os.WriteFile(in, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI("serve", "--check", "--config", in)
	if code != 0 || errs != "" {
		t.Fatalf("serve --check: %d %q", code, errs)
	}
	for _, want := range []string{"\n    page_size: 32\n", "\n    default_ttl: 1m30s\n", "upstream_api_key: (set)", "(API key 1):"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve --check lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"sk-secret", "sk-tenant-key", "{WorkerID", "Index:{"} {
		if strings.Contains(out, secret) {
			t.Errorf("serve --check prints %q:\n%s", secret, out)
		}
	}
	back := filepath.Join(dir, "back.yaml")
	if err := os.WriteFile(back, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := config.Load(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.Load(back, nil)
	if err != nil {
		t.Fatalf("the printed configuration does not load: %v\n%s", err, out)
	}
	a, errA := want.YAML()
	b, errB := got.YAML()
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		t.Errorf("printed and loaded back:\n%s\nwant\n%s (%v %v)", b, a, errA, errB)
	}
}

// argumentMistakes are command lines with a mistake in their arguments,
// and how the error they print starts.
var argumentMistakes = []struct {
	args []string
	want string
}{
	{[]string{"ctl", "stats", "extra"}, `kvpilot ctl stats: takes no arguments, got ["extra"]`},
	{[]string{"ctl", "watch", "extra"}, "kvpilot ctl watch: takes no arguments"},
	{[]string{"ctl", "evict", "--session", "s", "--end", "4", "x"}, "kvpilot ctl evict: takes no arguments"},
	{[]string{"ctl", "share", "--session", "s", "--end", "4", "x"}, "kvpilot ctl share: takes no arguments"},
	{[]string{"ctl", "retain", "--session", "s", "--end", "4", "x"}, "kvpilot ctl retain: takes no arguments"},
	{[]string{"ctl", "apply", "a.json", "b.json"}, "kvpilot ctl apply: takes one FILE"},
	{[]string{"ctl", "prune", "1", "2"}, "kvpilot ctl prune: want 1 HASH argument(s), got 2"},
	{[]string{"ctl", "prune", "xyz"}, "kvpilot ctl prune: invalid_hash: invalid block hash"},
	{[]string{"ctl", "pin-prefix", "--ttl", "soon", "1"}, `kvpilot ctl pin-prefix: invalid ttl: "soon"`},
	{[]string{"ctl", "renew", "lease-1"}, "kvpilot ctl renew: needs LEASE and TTL"},
	{[]string{"ctl", "warm"}, "kvpilot ctl warm: needs at least one KEY"},
	{[]string{"hash", "--block-size", "4", "abc"}, `kvpilot hash: token "abc" is not an integer`},
	{[]string{"version", "extra"}, "kvpilot version: takes no arguments"},
	{[]string{"serve", "extra"}, "kvpilot serve: takes no arguments"},
}
