package truncation

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

func TestTraceGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		file   string
		params map[string]any
	}{
		// Leyline's deployed treatment: truncate_older_than(n=2, max_chars=200, tools=bash).
		{"leyline-debuggym", "debuggym_debug_gym.jsonl", map[string]any{"older_than": 2, "max_chars": 200}},
		{"leyline-bash-sweagent", "adp_swe-smith_sample_raw.jsonl", map[string]any{"tools": []string{"bash"}}},
		// clear_tool_uses style: trigger, keep, clear_at_least, exclude, placeholder.
		{"clear-tool-uses-spotter", "spotter_agent-a2898e3.jsonl", map[string]any{
			"older_than": 0, "trigger": map[string]any{"type": "input_tokens", "value": 20000},
			"keep": map[string]any{"type": "tool_uses", "value": 3}, "clear_at_least": map[string]any{"type": "input_tokens", "value": 2000},
			"exclude_tools": []string{"Glob"}, "placeholder": "[tool result cleared]", "mode": "forget"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trs, err := policytest.LoadNamedTraces(tc.file)
			if err != nil {
				t.Fatalf("the repository's traces: %v", err)
			}
			var out []byte
			for _, tr := range trs {
				h := policytest.New(t, New(), tc.params)
				res, err := policytest.Replay(h, tr, policytest.ReplayOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if res.Stats.Directives == 0 {
					t.Fatalf("session %s: no truncation at all", tr.SessionID)
				}
				if res.Stats.FinalTokens >= res.Stats.UneditedTokens {
					t.Fatalf("session %s: %d tokens with the policy, %d without", tr.SessionID, res.Stats.FinalTokens, res.Stats.UneditedTokens)
				}
				out = append(out, res.JSON()...)
			}
			policytest.Golden(t, filepath.Join("testdata", tc.name+".golden"), out)
		})
	}
}

func started(ms ...chat.Message) policy.Observation {
	return policy.Observation{Kind: policy.KindRequestStarted, Session: "s", Started: &policy.RequestStarted{Messages: ms, PromptTokens: 1000}}
}

func TestRules(t *testing.T) {
	long := strings.Repeat("x", 1000)
	msgs := func() []chat.Message {
		var ms []chat.Message
		pos := int64(0)
		add := func(role, tool, content string) {
			ms = append(ms, chat.Message{Role: role, ToolName: tool, Content: content, Span: chat.Span{Start: pos + 2, End: pos + 2 + int64(len(content)/4)}})
			pos += 4 + int64(len(content)/4)
		}
		add("user", "", "fix it")
		for i := 0; i < 4; i++ {
			add("assistant", "bash", strings.Repeat("ls ", 20))
			add("tool", "bash", long)
		}
		add("assistant", "edit", "x")
		add("tool", "edit", long)
		return ms
	}()
	for _, tc := range []struct {
		name   string
		params map[string]any
		want   int
	}{
		{"older than 2 turns", nil, 2},
		{"only edit", map[string]any{"tools": []string{"edit"}}, 0},
		{"exclude bash", map[string]any{"exclude_tools": []string{"BASH"}}, 0},
		{"keep 4 tool uses", map[string]any{"older_than": 0, "keep": map[string]any{"type": "tool_uses", "value": 4}}, 1},
		{"trigger not reached", map[string]any{"trigger": map[string]any{"type": "input_tokens", "value": 5000}}, 0},
		{"trigger by tool uses", map[string]any{"trigger": map[string]any{"type": "tool_uses", "value": 5}}, 2},
		{"clear_at_least too high", map[string]any{"clear_at_least": map[string]any{"type": "input_tokens", "value": 100000}}, 0},
		{"inputs too", map[string]any{"clear_tool_inputs": true, "placeholder": "[cleared]", "max_chars": 1}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := policytest.New(t, New(), tc.params)
			ds := h.Observe(started(msgs...))
			if len(ds) != tc.want {
				t.Fatalf("%d directives, want %d: %v", len(ds), tc.want, ds)
			}
			for _, d := range ds {
				sp := d.(directive.Splice)
				if tc.params == nil && (sp.Mode != directive.ModeAmortize || !strings.Contains(sp.Replacement.Text, "chars truncated")) {
					t.Fatalf("default splice %+v: want amortize with a head/tail stub", sp)
				}
			}
			// The same request again edits nothing: those messages are done.
			if ds := h.Observe(started(msgs...)); len(ds) != 0 {
				t.Fatalf("re-edited %d messages", len(ds))
			}
		})
	}
}

func TestBadParams(t *testing.T) {
	for _, p := range []map[string]any{
		{"mode": "rewrite"}, {"older_than": -1}, {"trigger": map[string]any{"type": "turns", "value": 1}},
		{"keep": map[string]any{"type": "input_tokens", "value": 1}}, {"unknown": 1},
	} {
		if _, err := policytest.Start(t, New(), p); err == nil {
			t.Fatalf("params %v accepted", p)
		}
	}
}

func TestStub(t *testing.T) {
	s := Stub(strings.Repeat("a", 300)+strings.Repeat("b", 300), 200)
	if !strings.HasPrefix(s, strings.Repeat("a", 100)+"\n[... 400 chars truncated ...]\n") || !strings.HasSuffix(s, strings.Repeat("b", 100)) {
		t.Fatalf("stub %q", s)
	}
	if Stub("short", 200) != "" {
		t.Fatal("a short text got a stub")
	}
}
