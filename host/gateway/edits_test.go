package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/chat"
)

// conversation builds a history of n tool uses, each with a long result.
func conversation(n int) []chat.Message {
	msgs := []chat.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "go"}}
	for i := 0; i < n; i++ {
		id := "call_" + string(rune('a'+i))
		name := "bash"
		if i%3 == 2 {
			name = "memory"
		}
		msgs = append(msgs,
			chat.Message{Role: "assistant", ThinkingText: strings.Repeat("think ", 10+i),
				ToolCalls: []chat.ToolCall{{ID: id, Type: "function", Function: chat.FunctionCall{Name: name, Arguments: `{"cmd":"ls ` + id + `"}`}}}},
			chat.Message{Role: "tool", ToolCallID: id, Content: strings.Repeat("output "+id+" ", 40)})
	}
	return msgs
}

func placeholders(ms []chat.Message) []int {
	var out []int
	for i, m := range ms {
		if m.Role == "tool" && m.Content == Placeholder {
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
			if len(tc.want) == 0 {
				if len(out.Applied) != 0 {
					t.Fatalf("nothing cleared, yet applied %+v", out.Applied)
				}
				return
			}
			a := out.Applied[0]
			if a.Type != EditClearToolUses || *a.ClearedToolUses != len(tc.want) || (a.ClearedInputTokens > 0) != tc.saved {
				t.Fatalf("applied %+v (cleared %d)", a, *a.ClearedToolUses)
			}
			if msgs[3].Content == Placeholder {
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

// With sticky clears (opt-in), a cleared result stays cleared on later
// turns even when the context no longer reaches the trigger, with the same
// placeholder; the clears of items a diverged history no longer holds are
// dropped.
func TestStickyClearsStayAndForget(t *testing.T) {
	sticky := func(trigger int64, keep int) Rules { return Rules{Tools: toolRule(trigger, keep), StickyClears: true} }
	msgs := conversation(4)
	first := Apply(msgs, sticky(10, 1), Sticky{})
	again := Apply(msgs, sticky(10, 1), Sticky{})
	if !reflect.DeepEqual(first.Messages, again.Messages) {
		t.Fatal("the same request edited twice differs")
	}
	next := append(append([]chat.Message(nil), msgs...), conversation(5)[10:]...)
	later := Apply(next, sticky(1<<20, 1), first.Next)
	if got, want := placeholders(later.Messages), placeholders(first.Messages); !reflect.DeepEqual(got, want) {
		t.Fatalf("later turn cleared %v, the first %v: clears must be sticky", got, want)
	}
	if len(later.Fresh) != 0 || *later.Applied[0].ClearedToolUses != len(placeholders(first.Messages)) {
		t.Fatalf("later turn: fresh %+v, applied %+v", later.Fresh, later.Applied[0])
	}
	fork := append([]chat.Message(nil), msgs[:4]...)
	fork = append(fork, chat.Message{Role: "user", Content: "something else"})
	f := Apply(fork, Rules{StickyClears: true}, first.Next)
	if len(f.Next) != 1 || !reflect.DeepEqual(placeholders(f.Messages), []int{3}) {
		t.Fatalf("fork kept %d clears, placeholders %v", len(f.Next), placeholders(f.Messages))
	}
	// A rewind that brings a cleared result back among the newest keep
	// leaves it intact.
	rewound := Apply(msgs[:6], Rules{Tools: toolRule(1<<20, 1), StickyClears: true}, first.Next)
	if got := placeholders(rewound.Messages); !reflect.DeepEqual(got, []int{3}) {
		t.Fatalf("rewound to two results with keep 1: cleared %v, want [3]", got)
	}
}

// documentedClears is the documented clear_tool_uses rule on a history,
// written out independently of the editor: when the unedited input
// reaches the trigger, every tool result but the newest keep is cleared
// (none here is excluded or too short to replace).
func documentedClears(msgs []chat.Message, trigger int64, keep int) []int {
	if inputTokens(msgs) < trigger {
		return nil
	}
	var results []int
	for i, m := range msgs {
		if m.Role == "tool" {
			results = append(results, i)
		}
	}
	if len(results) <= keep {
		return nil
	}
	return results[:len(results)-keep]
}

// By default every turn of a growing session, and a rewound one, is
// decided by the documented rule on its whole history: at most keep tool
// results stay intact once the unedited input reaches the trigger, the
// edits of a history are the same however the session got there (so a
// resent prefix still hits the cache), and applied_edits counts what the
// request's history has cleared.
func TestEveryTurnFollowsTheDocumentedRule(t *testing.T) {
	const keep = 2
	full := conversation(12)
	trigger := inputTokens(full[:12]) // reached at the fifth result, not before
	rules := Rules{Tools: toolRule(trigger, keep)}
	prev := Sticky{}
	var prevOut []chat.Message
	for n := 3; n <= len(full); n += 2 { // each turn adds a tool call and its result
		out := Apply(full[:n], rules, prev)
		want := documentedClears(full[:n], trigger, keep)
		if got := placeholders(out.Messages); !reflect.DeepEqual(got, want) {
			t.Fatalf("%d messages: cleared %v, the documented rule clears %v", n, got, want)
		}
		cleared := 0
		for _, a := range out.Applied {
			cleared += *a.ClearedToolUses
		}
		if cleared != len(want) || (len(want) == 0) != (len(out.Applied) == 0) {
			t.Fatalf("%d messages: applied_edits %+v for %d cleared", n, out.Applied, len(want))
		}
		// Deterministic: the same history from a fresh session, and the
		// previous turn's messages are edited as they were, up to the
		// first result this turn newly clears.
		if fresh := Apply(full[:n], rules, Sticky{}); !reflect.DeepEqual(fresh.Messages, out.Messages) {
			t.Fatalf("%d messages: edits depend on the session's past", n)
		}
		if prevOut != nil {
			firstNew := len(prevOut)
			for _, i := range want {
				if prevOut[i].Content != Placeholder {
					firstNew = min(firstNew, i)
				}
			}
			if !reflect.DeepEqual(out.Messages[:firstNew], prevOut[:firstNew]) {
				t.Fatalf("%d messages: the prefix before the newly cleared results changed", n)
			}
		}
		prev, prevOut = out.Next, out.Messages
	}
	// A named session rewound to an earlier turn gets that turn's edits.
	back := Apply(full[:13], rules, prev)
	if got, want := placeholders(back.Messages), documentedClears(full[:13], trigger, keep); !reflect.DeepEqual(got, want) {
		t.Fatalf("rewound: cleared %v, the documented rule clears %v", got, want)
	}
}

// Nothing triggered, nothing listed: applied_edits is the list of edits
// that cleared something.
func TestAppliedEditsListsOnlyWhatCleared(t *testing.T) {
	out := Apply(conversation(4), Rules{Tools: toolRule(1<<20, 1), Think: &ThinkRule{Keep: 9}}, Sticky{})
	if len(out.Applied) != 0 || len(out.Fresh) != 0 {
		t.Fatalf("applied %+v, fresh %+v", out.Applied, out.Fresh)
	}
	tr := &turn{out: out}
	if b, _ := json.Marshal(tr.report()); string(b) != `{"applied_edits":[]}` {
		t.Fatalf("report %s", b)
	}
	out = Apply(conversation(4), Rules{Tools: toolRule(1<<20, 1), Think: &ThinkRule{Keep: 1}}, Sticky{})
	if len(out.Applied) != 1 || out.Applied[0].Type != EditClearThinking {
		t.Fatalf("applied %+v", out.Applied)
	}
}

func TestClearThinkingKeepsTheNewestTurns(t *testing.T) {
	msgs := conversation(4) // assistant turns at 2, 4, 6, 8
	for keep, want := range map[int]int{0: 4, 1: 3, 3: 1, 9: 0, -1: 0} {
		out := Apply(msgs, Rules{Think: &ThinkRule{Keep: keep}}, Sticky{})
		n := 0
		for _, m := range out.Messages {
			if m.Role == "assistant" && m.ThinkingText == "" {
				n++
			}
		}
		reported := 0
		if len(out.Applied) > 0 {
			reported = *out.Applied[0].ClearedThinkingTurns
		}
		if n != want || reported != want {
			t.Fatalf("keep %d: %d turns cleared (reported %d), want %d", keep, n, reported, want)
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
		if m.Role == "tool" && strings.Contains(m.Content, "chars truncated") {
			stubbed = append(stubbed, i)
		}
	}
	if !reflect.DeepEqual(stubbed, []int{3, 5}) { // 7 is memory, 9 is too recent
		t.Fatalf("stubbed %v", stubbed)
	}
}
