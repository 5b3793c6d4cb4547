package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/errcode/errcodetest"
)

// Every error the front door answers reads once: one registry code, no
// registry message twice, no Go type name ("[]chat.Message"), in both
// APIs' shapes. The walk covers each kind of failure: bodies that are not
// JSON or hold the wrong JSON types, missing and invalid fields, unknown
// roles and blocks, cache_control and context_management mistakes,
// unpaired tool blocks, and each way the upstream fails or refuses
// (another kvpilot's refusal relayed included).
func TestEveryErrorTheFrontDoorAnswersReadsOnce(t *testing.T) {
	up := &fakeUpstream{}
	_, url := startGateway(t, up, Rules{})
	_, deadURL := startGateway(t, nil, Rules{})
	oa := func(fields string) string { return `{"model":"m",` + fields + `}` }
	an := func(fields string) string { return `{"model":"m","max_tokens":8,` + fields + `}` }
	user := `"messages":[{"role":"user","content":"hi"}]`
	bodies := map[string][]string{
		"/v1/chat/completions": {
			`{"model":`, `[1,2]`, `"text"`, `{"messages":[]}`, oa(`"messages":"hi"`), oa(`"messages":[{"role":1}]`),
			oa(`"messages":[{"role":"robot","content":"x"}]`), oa(`"messages":[]`),
			oa(`"messages":[{"role":"tool","tool_call_id":"c","content":"x"}]`),
			oa(`"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]`),
			oa(user + `,"context_management":{"edits":[{"type":"compact_20260112"}]}`),
			oa(user + `,"context_management":{"edits":[{}]}`),
			oa(user + `,"context_management":{"edits":"all"}`),
			oa(user + `,"context_management":{"edits":[{"type":"clear_tool_uses_20250919","keep":{"type":"tool_uses","value":-1}}]}`),
			oa(user + `,"context_management":{"edits":[{"type":"clear_tool_uses_20250919","keep":"3"}]}`),
			oa(user + `,"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"turns","value":3}}]}`),
			oa(user + `,"context_management":{"edits":[{"type":"clear_tool_uses_20250919","clear_tool_inputs":7}]}`),
			oa(user + `,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns"}}]}`),
		},
		"/v1/messages": {
			`{"model":`, `[1,2]`, `{"model":"m"}`, an(`"messages":"hi"`), an(`"messages":[{"role":"user","content":5}]`),
			an(`"messages":[{"role":"user","content":[{"type":"text","text":5}]}]`),
			an(`"messages":[{"role":"robot","content":"x"}]`), an(`"messages":[]`), `{"model":"m",` + user + `}`,
			an(`"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]`),
			an(`"messages":[{"role":"assistant","content":[{"type":"image"}]}]`),
			an(`"system":[{"type":"image"}],` + user),
			an(`"system":5,` + user),
			an(`"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"soon"}}]}]`),
			an(`"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"forever"}}]}]`),
			an(`"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]}]`),
			an(`"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]`),
			an(`"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]`),
			an(`"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"{"}]}]`),
			an(user + `,"tool_choice":{"type":"sometimes"}`),
			an(user + `,"tool_choice":"auto"`),
			an(user + `,"context_management":{"edits":[{"type":"compact_20260112"}]}`),
			an(user + `,"context_management":{"edits":[{"type":"clear_tool_uses_20250919","clear_at_least":{"type":"tool_uses","value":1}}]}`),
		},
	}
	check := func(what, path string, status int, b []byte) {
		t.Helper()
		var e struct {
			Error struct{ Message, Hint string }
		}
		if err := json.Unmarshal(b, &e); err != nil || status < 400 || e.Error.Message == "" {
			t.Errorf("%s %s: %d %s; want an error", path, what, status, b)
			return
		}
		if p := errcodetest.Problems(e.Error.Message + "\n" + e.Error.Hint); len(p) > 0 {
			t.Errorf("%s %s answered %q: %s", path, what, e.Error.Message, strings.Join(p, "; "))
		}
	}
	up.set("ok")
	for path, bs := range bodies {
		for _, b := range bs {
			status, out := post(t, url+path, b)
			check(b, path, status, out)
		}
	}
	for _, mode := range []string{"404", "503", "500", "slow", "toolong", "toolong-ref", "kv400"} {
		up.set(mode)
		for _, c := range []struct{ path, body string }{{"/v1/chat/completions", oaBody}, {"/v1/messages", anBody}} {
			status, out := post(t, url+c.path, c.body)
			check("upstream "+mode, c.path, status, out)
		}
	}
	for _, c := range []struct{ path, body string }{{"/v1/chat/completions", oaBody}, {"/v1/messages", anBody}} {
		status, out := post(t, deadURL+c.path, c.body)
		check("upstream down", c.path, status, out)
	}
}
