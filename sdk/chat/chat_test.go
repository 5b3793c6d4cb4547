package chat

import (
	"slices"
	"testing"
)

// A message's age is the assistant turns that start after it; consecutive
// assistant messages (text, then a tool call) are one turn.
func TestTurnAges(t *testing.T) {
	var ms []Message
	for _, r := range []string{"system", "user", "assistant", "assistant", "tool", "assistant", "user", "assistant"} {
		ms = append(ms, Message{Role: r})
	}
	if got, want := TurnAges(ms), []int{3, 3, 2, 2, 2, 1, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("ages %v, want %v", got, want)
	}
	if got := TurnAges(nil); len(got) != 0 {
		t.Fatalf("ages of nothing: %v", got)
	}
}
