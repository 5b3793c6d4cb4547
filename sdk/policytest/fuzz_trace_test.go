package policytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// quiet is an Observer whose policy never answers, so a fuzzed replay
// exercises the trace parsing and session model alone.
type quiet struct{}

func (quiet) TryObserve(policy.Observation) ([]directive.Directive, error) { return nil, nil }

// FuzzLoadTraces feeds LoadTraces arbitrary file contents (trace files come
// from outside: recorded sessions, benchmarks' inputs) and replays what it
// accepts. For any input: no panic; an error or traces; and every loaded
// trace replays without panicking (an error is allowed, a crash is not).
func FuzzLoadTraces(f *testing.F) {
	f.Add([]byte(`{"session_id":"s1","source":"x","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"<think>hmm</think>hello","thinking":null},{"role":"tool","content":"ok","tool_name":"bash"}]}` + "\n\n"))
	f.Add([]byte(`{"session_id":"s2","messages":[{"role":"assistant","content":null,"tool_name":null,"thinking":"t"}]}` + "\n" + `{"session_id":"s3","messages":[]}`))
	f.Add([]byte("{\"session_id\":1}\n"))
	f.Add([]byte("not json\n"))
	// Excerpts of the repository's traces: the first session of each
	// file, cut to a few short messages.
	traces, err := TracesDir()
	if err != nil {
		f.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(traces, "*.jsonl"))
	if len(files) == 0 {
		f.Fatalf("no trace files in %s", traces)
	}
	for _, p := range files {
		trs, err := LoadTraces(p)
		if err != nil || len(trs) == 0 {
			continue
		}
		tr := trs[0]
		tr.Messages = tr.Messages[:min(len(tr.Messages), 6)]
		for i := range tr.Messages {
			m := &tr.Messages[i]
			m.Content, m.ThinkingText = m.Content[:min(len(m.Content), 200)], m.ThinkingText[:min(len(m.ThinkingText), 200)]
		}
		b, err := json.Marshal(tr)
		if err == nil {
			f.Add(append(b, '\n'))
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "trace.jsonl")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		trs, err := LoadTraces(path)
		if err != nil {
			if trs != nil {
				t.Fatalf("error %v with %d traces", err, len(trs))
			}
			return
		}
		for _, tr := range trs {
			_, _ = Replay(quiet{}, tr, ReplayOptions{PageSize: 4, MaxRequests: 4, RenderThinking: true})
		}
	})
}
