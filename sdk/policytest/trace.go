package policytest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/kvpilot/kvpilot/sdk/chat"
)

// Trace is one recorded agent session in the traces' JSON Lines format:
// {"session_id", "source", "messages": [{"role", "content", "tool_name",
// "thinking"}]}, a message's thinking read as its ThinkingText (a null
// field reads as "").
type Trace struct {
	SessionID string
	Source    string
	Messages  []chat.Message
}

// traceLine is a Trace as a line of its file holds it: the edge where
// the file's form and chat.Message meet.
type traceLine struct {
	SessionID string `json:"session_id"`
	Source    string `json:"source"`
	Messages  []struct {
		Role     string `json:"role"`
		Content  string `json:"content"`
		ToolName string `json:"tool_name"`
		Thinking string `json:"thinking"`
	} `json:"messages"`
}

// UnmarshalJSON reads a line of a trace file.
func (t *Trace) UnmarshalJSON(b []byte) error {
	var l traceLine
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	*t = Trace{SessionID: l.SessionID, Source: l.Source, Messages: make([]chat.Message, len(l.Messages))}
	for i, m := range l.Messages {
		t.Messages[i] = chat.Message{Role: m.Role, Content: m.Content, ToolName: m.ToolName, ThinkingText: m.Thinking}
	}
	return nil
}

// MarshalJSON writes the trace as a line of its file.
func (t Trace) MarshalJSON() ([]byte, error) {
	l := traceLine{SessionID: t.SessionID, Source: t.Source}
	l.Messages = slices.Grow(l.Messages, len(t.Messages))[:len(t.Messages)]
	for i, m := range t.Messages {
		lm := &l.Messages[i]
		lm.Role, lm.Content, lm.ToolName, lm.Thinking = m.Role, m.Content, m.ToolName, m.ThinkingText
	}
	return json.Marshal(l)
}

// LoadTraces reads a JSON Lines trace file, one session per line.
func LoadTraces(path string) ([]Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load traces: %w", err)
	}
	defer f.Close()
	var out []Trace
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var t Trace
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			return nil, fmt.Errorf("load traces: %s line %d: %w", path, line, err)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("load traces: %s: %w", path, err)
	}
	return out, nil
}
