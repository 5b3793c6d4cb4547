package gateway

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

// conversation builds a history of n tool uses, each with a long result.
func conversation(n int) []chatwire.Message {
	msgs := []chatwire.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "go"}}
	for i := 0; i < n; i++ {
		id := "call_" + string(rune('a'+i))
		name := "bash"
		if i%3 == 2 {
			name = "memory"
		}
		msgs = append(msgs,
			chatwire.Message{Role: "assistant", ReasoningContent: strings.Repeat("think ", 10+i),
				ToolCalls: []chatwire.ToolCall{{ID: id, Type: "function", Function: chatwire.FunctionCall{Name: name, Arguments: `{"cmd":"ls ` + id + `"}`}}}},
			chatwire.Message{Role: "tool", ToolCallID: id, Content: chatwire.Content(strings.Repeat("output "+id+" ", 40))})
	}
	return msgs
}

func placeholders(ms []chatwire.Message) []int {
	var out []int
	for i, m := range ms {
		if m.Role == "tool" && string(m.Content) == Placeholder {
			out = append(out, i)
		}
	}
	return out
}

func toolRule(trigger int64, keep int) *ToolRule {
	cm := contextManagement{Edits: []editSpec{{Type: EditClearToolUses}}}
	r, err := cm.rules()
	if err != nil {
		panic(err)
	}
	r.Tools.TriggerValue, r.Tools.Keep = trigger, keep
	return r.Tools
}

func TestClearToolUsesRules(t *testing.T) {
	msgs := conversation(6) // results at 3, 5, 7, 9, 11, 13; memory at 7 and 13
	for _, tc := range []struct {
		name  string
		rule  func() *ToolRule
		want  []int
		saved bool
	}{
		{"below the trigger", func() *ToolRule { return toolRule(1<<20, 1) }, nil, false},
		{"keep the newest two", func() *ToolRule { return toolRule(10, 2) }, []int{3, 5, 7, 9}, true},
		{"exclude memory", func() *ToolRule { r := toolRule(10, 2); r.Exclude = lowerSet([]string{"Memory"}); return r }, []int{3, 5, 9}, true},
		{"clear_at_least unmet", func() *ToolRule { r := toolRule(10, 2); r.ClearAtLeast = 1 << 20; return r }, nil, false},
		{"tool_uses trigger", func() *ToolRule { r := toolRule(6, 5); r.TriggerType = "tool_uses"; return r }, []int{3}, true},
		{"tool_uses trigger unmet", func() *ToolRule { r := toolRule(7, 5); r.TriggerType = "tool_uses"; return r }, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Apply(msgs, Rules{Tools: tc.rule()}, Sticky{})
			if got := placeholders(out.Messages); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("cleared results at %v, want %v", got, tc.want)
			}
			a := out.Applied[0]
			if a.Type != EditClearToolUses || *a.ClearedToolUses != len(tc.want) || (a.ClearedInputTokens > 0) != tc.saved {
				t.Fatalf("applied %+v (cleared %d)", a, *a.ClearedToolUses)
			}
			if string(msgs[3].Content) == Placeholder {
				t.Fatal("Apply modified its input")
			}
		})
	}
}

func TestClearToolInputs(t *testing.T) {
	r := toolRule(10, 4)
	r.ClearInputs = true
	out := Apply(conversation(6), Rules{Tools: r}, Sticky{})
	if got := out.Messages[2].ToolCalls[0].Function.Arguments; got != clearedInput {
		t.Fatalf("the cleared use's arguments are %q", got)
	}
	if got := out.Messages[10].ToolCalls[0].Function.Arguments; got == clearedInput {
		t.Fatal("a kept use's arguments were cleared")
	}
}

// Once cleared, a result stays cleared on later turns even when the
// context no longer reaches the trigger, with the same placeholder; the
// clears of items a diverged history no longer holds are dropped.
func TestEditsAreStickyAndDeterministic(t *testing.T) {
	msgs := conversation(4)
	first := Apply(msgs, Rules{Tools: toolRule(10, 1)}, Sticky{})
	again := Apply(msgs, Rules{Tools: toolRule(10, 1)}, Sticky{})
	if !reflect.DeepEqual(first.Messages, again.Messages) {
		t.Fatal("the same request edited twice differs")
	}
	next := append(append([]chatwire.Message(nil), msgs...), conversation(5)[10:]...)
	later := Apply(next, Rules{Tools: toolRule(1<<20, 1)}, first.Next)
	if got, want := placeholders(later.Messages), placeholders(first.Messages); !reflect.DeepEqual(got, want) {
		t.Fatalf("later turn cleared %v, the first %v: clears must be sticky", got, want)
	}
	if later.New != 0 || *later.Applied[0].ClearedToolUses != len(placeholders(first.Messages)) {
		t.Fatalf("later turn: new %d, applied %+v", later.New, later.Applied[0])
	}
	fork := append([]chatwire.Message(nil), msgs[:4]...)
	fork = append(fork, chatwire.Message{Role: "user", Content: "something else"})
	f := Apply(fork, Rules{}, first.Next)
	if len(f.Next) != 1 || !reflect.DeepEqual(placeholders(f.Messages), []int{3}) {
		t.Fatalf("fork kept %d clears, placeholders %v", len(f.Next), placeholders(f.Messages))
	}
}

func TestClearThinkingKeepsTheNewestTurns(t *testing.T) {
	msgs := conversation(4) // assistant turns at 2, 4, 6, 8
	for keep, want := range map[int]int{0: 4, 1: 3, 3: 1, 9: 0, -1: 0} {
		out := Apply(msgs, Rules{Think: &ThinkRule{Keep: keep}}, Sticky{})
		n := 0
		for _, m := range out.Messages {
			if m.Role == "assistant" && m.ReasoningContent == "" {
				n++
			}
		}
		if n != want || *out.Applied[0].ClearedThinkingTurns != want {
			t.Fatalf("keep %d: %d turns cleared (reported %d), want %d", keep, n, *out.Applied[0].ClearedThinkingTurns, want)
		}
	}
}

// The truncation policy's rule, derived from its params: results with
// more than older_than assistant turns after them become head/tail stubs.
func TestPolicyRulesFollowTheTruncationPolicy(t *testing.T) {
	r, err := truncationRule([]byte(`{"older_than": 1, "max_chars": 40, "exclude_tools": ["memory"]}`))
	if err != nil {
		t.Fatal(err)
	}
	out := Apply(conversation(4), Rules{Tools: r}, Sticky{})
	var stubbed []int
	for i, m := range out.Messages {
		if m.Role == "tool" && strings.Contains(string(m.Content), "chars truncated") {
			stubbed = append(stubbed, i)
		}
	}
	if !reflect.DeepEqual(stubbed, []int{3, 5}) { // 7 is memory, 9 is too recent
		t.Fatalf("stubbed %v", stubbed)
	}
}
