package policytest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// Trace is one recorded agent session in the shared/traces format.
type Trace struct {
	SessionID string         `json:"session_id"`
	Source    string         `json:"source"`
	Messages  []TraceMessage `json:"messages"`
}

// TraceMessage is one message of a Trace. A null field reads as "".
type TraceMessage struct {
	Role     string `json:"role"`
	Content  string `json:"content"`
	ToolName string `json:"tool_name"`
	Thinking string `json:"thinking"`
}

// UnmarshalJSON accepts nulls for the optional strings.
func (m *TraceMessage) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role     string  `json:"role"`
		Content  *string `json:"content"`
		ToolName *string `json:"tool_name"`
		Thinking *string `json:"thinking"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	*m = TraceMessage{Role: raw.Role, Content: deref(raw.Content), ToolName: deref(raw.ToolName), Thinking: deref(raw.Thinking)}
	return nil
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
