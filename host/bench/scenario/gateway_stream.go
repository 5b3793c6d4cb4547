package scenario

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// readChatStream reads an OpenAI stream: the time to its first chunk, the
// usage and kvpilot's extension in its usage chunk, the applied edits of
// its first chunk, the answer's text; an error event fails it.
func readChatStream(r io.Reader, start time.Time) (ChatResult, error) {
	var res ChatResult
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	first := true
	var text strings.Builder
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if first {
			res.TTFTms = float64(time.Since(start).Microseconds()) / 1e3
		}
		if line == "[DONE]" {
			res.Text = text.String()
			return res, nil
		}
		var c struct {
			chatwire.Response
			Error             *chatwire.ErrorDetail `json:"error"`
			ContextManagement *struct {
				AppliedEdits []struct {
					ClearedToolUses int `json:"cleared_tool_uses"`
				} `json:"applied_edits"`
			} `json:"context_management"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return res, fmt.Errorf("chunk: %w", err)
		}
		if c.Error != nil {
			return res, fmt.Errorf("stream error: %s", c.Error.Message)
		}
		if first && c.ContextManagement != nil {
			for _, a := range c.ContextManagement.AppliedEdits {
				res.Cleared += a.ClearedToolUses
			}
		}
		first = false
		for _, ch := range c.Choices {
			if ch.Delta != nil && ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
		}
		if c.Usage != nil {
			res.Prompt, res.Cached = c.Usage.PromptTokens, c.Usage.Cached()
			var st refengine.Stats
			if json.Unmarshal(c.KVPilot, &st) == nil {
				res.ModelledMs = st.TTFTms
			}
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	return res, io.ErrUnexpectedEOF
}

// Charts: prefill and mean TTFT per arm.
func (r *GatewayReport) Charts() []Chart {
	return []Chart{
		{Title: "prefill tokens", Unit: "tokens", Bars: barsOf(gatewayArms, func(n string) float64 { return float64(r.Arms[n].PrefillTokens) })},
		{Title: "TTFT through HTTP, mean", Unit: "ms", Bars: barsOf(gatewayArms, func(n string) float64 { return r.Arms[n].TTFTms.Mean })},
	}
}
