package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/kvpilot/kvpilot/host/config"
)

// passConfig is one pass: its name, config file and environment.
type passConfig struct {
	name, path string
	env        []string
	// edits: the front door edits the messages; splices: kvpilot splices.
	edits, splices bool
}

// passConfigs writes the two prefix-cache configs beside the demo's: its
// text without policies and with auto_splice off, the second with the
// demo's truncation and think-evict as the front door's edit policies;
// and, when idleAfter is set, the demo's own with idle-pause's idle_after
// replaced.
//
// compare adds two passes that put the defaults' figures in context: kvpilot
// with the recompute turned off (what the splice costs uncorrected), and the
// re-prefill pass again (how often a re-prefill agrees with itself: the
// noise floor of batched CPU kernels).
func passConfigs(path, idleAfter string, compare bool) ([]passConfig, func(), error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("demo config: %w", err)
	}
	c, err := config.Load(path, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("demo config: %w", err)
	}
	text := string(b)
	if i := strings.Index(text, "\npolicies:"); i >= 0 {
		text = text[:i+1]
	}
	text = strings.Replace(text, "auto_splice: true", "auto_splice: false", 1) + "policies: []\n"
	var edit []map[string]any
	for _, p := range c.Policies {
		if p.Builtin == "truncation" || p.Builtin == "think-evict" {
			edit = append(edit, map[string]any{"name": p.Name, "builtin": p.Builtin, "params": p.Params})
		}
	}
	gw, err := json.Marshal(map[string]any{"policies": edit})
	if err != nil {
		return nil, nil, err
	}
	var files []string
	cleanup := func() {
		for _, f := range files {
			_ = os.Remove(f)
		}
	}
	write := func(body string) (string, error) {
		f, err := os.CreateTemp("", "kvpilot-demo-*.yaml")
		if err != nil {
			return "", err
		}
		defer f.Close()
		files = append(files, f.Name())
		_, err = f.WriteString(body)
		return f.Name(), err
	}
	plain, err := write(text)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	edited, err := write(text + "gateway: " + string(gw) + "\n")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if idleAfter != "" {
		re := regexp.MustCompile(`idle_after: [^,}\s]+`)
		if len(re.FindAllString(string(b), -1)) != 1 {
			cleanup()
			return nil, nil, fmt.Errorf("demo config %s: want one idle-pause idle_after to replace", path)
		}
		if path, err = write(re.ReplaceAllString(string(b), "idle_after: "+idleAfter)); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	passes := []passConfig{
		{name: "prefix cache", path: plain, env: []string{"KVPILOT_GATEWAY__POLICY_EDITS=false"}},
		{name: "prefix cache + edits", path: edited, edits: true},
		{name: "kvpilot + 4 policies", path: path, edits: true, splices: true},
	}
	if compare {
		passes = append(passes,
			passConfig{name: "kvpilot, no recompute", path: path, edits: true, splices: true,
				env: []string{"KVPILOT_SPLICE__RECOMPUTE__FIRST=0", "KVPILOT_SPLICE__MAX_KL=0"}},
			passConfig{name: "prefix cache + edits, again", path: edited, edits: true})
	}
	return passes, cleanup, nil
}
