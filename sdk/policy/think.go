package policy

import "strings"

// ThinkOpen and ThinkClose delimit inline reasoning in Qwen3- and
// DeepSeek-style chat templates.
const (
	ThinkOpen  = "<think>"
	ThinkClose = "</think>"
)

// FindThinkSpans returns the byte ranges [start, end) of the
// <think>…</think> blocks in s, tags included. An unclosed block runs to
// the end of s: it is reasoning still in flight. Hosts use it to fill
// chat.Message.Thinking after mapping bytes to tokens.
func FindThinkSpans(s string) [][2]int {
	var out [][2]int
	for off := 0; off < len(s); {
		i := strings.Index(s[off:], ThinkOpen)
		if i < 0 {
			break
		}
		start := off + i
		j := strings.Index(s[start+len(ThinkOpen):], ThinkClose)
		if j < 0 {
			out = append(out, [2]int{start, len(s)})
			break
		}
		end := start + len(ThinkOpen) + j + len(ThinkClose)
		out = append(out, [2]int{start, end})
		off = end
	}
	return out
}
