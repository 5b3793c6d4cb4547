package scenario

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

// Trace is a recorded agent session (the examples/traces JSON Lines format).
type Trace = policytest.Trace

// LoadTraces reads the named trace files in order: each a path that exists
// as given, else the file of that name in $KVPILOT_TRACES or the
// repository's examples/traces (policytest.LoadNamedTraces).
func LoadTraces(names ...string) ([]Trace, error) {
	var out []Trace
	for _, n := range names {
		ts, err := policytest.LoadNamedTraces(n)
		if err != nil {
			return nil, err
		}
		if len(ts) == 0 {
			return nil, fmt.Errorf("trace %s holds no sessions", n)
		}
		out = append(out, ts...)
	}
	return out, nil
}

// The repository's traces (examples/traces) the scenarios use by default.
const (
	TraceOpus     = "spotter_258c7280-ae70-4798-800f-63464d01a85d.jsonl" // Claude Code, Opus, with thinking
	TraceSubagent = "spotter_agent-a2898e3.jsonl"
	TraceSWEAgent = "sweagent_pydicom__pydicom-1458.jsonl"
	TraceDebugGym = "debuggym_debug_gym.jsonl"
	TraceSWESmith = "adp_swe-smith_sample_raw.jsonl"
)

// SystemBlock is a fixed, deterministic system prompt of about tokens
// tokens (the traces carry none; their README asks benchmarks to
// prepend their own). Different names give unrelated
// blocks, so two sessions share a prefix only when they share a name.
func SystemBlock(name string, tokens int) string {
	var seed uint64 = 1469598103934665603
	for _, c := range []byte(name) {
		seed = (seed ^ uint64(c)) * 1099511628211
	}
	r := rand.New(rand.NewPCG(seed, 0x6b7670696c6f74))
	words := strings.Fields(`the agent must read write edit run test file files directory repository function
		method class module package build tool tools call result output error errors retry command shell
		bash python go json schema argument arguments parameter parameters string integer boolean array
		object required optional description return returns value values path line lines range search
		pattern replace diff patch commit branch review explain plan step steps context cache token tokens
		user assistant system message messages answer question careful concise safe never always before
		after when unless only each every first last next previous`)
	var b strings.Builder
	fmt.Fprintf(&b, "# System prompt %q (kvpilot benchmark block, deterministic)\n", name)
	for tool := 0; b.Len() < 4*tokens; tool++ {
		fmt.Fprintf(&b, "\n## Tool %s_%d\n", words[r.IntN(len(words))], tool)
		for s := 0; s < 6 && b.Len() < 4*tokens; s++ {
			n := 8 + r.IntN(12)
			for w := 0; w < n; w++ {
				if w > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(words[r.IntN(len(words))])
			}
			b.WriteString(".\n")
		}
	}
	s := b.String()
	return s[:min(len(s), 4*tokens)]
}

// RenderOptions shape how a trace becomes requests.
type RenderOptions struct {
	// System, when set, is prepended as a system message.
	System string
	// Tag, when set, follows the system message as a short user message
	// of its own, so two renderings of one trace share no page after the
	// system block.
	Tag string
	// Thinking renders each message's thinking as <think>…</think> inside
	// the assistant turn, as Qwen3- and DeepSeek-style templates do, and
	// gives each request the spans of its output's thinking.
	Thinking bool
	// StripThinking, with Thinking, removes each output's thinking from
	// the history of the requests after it, as a harness that strips
	// reasoning from what it resends.
	StripThinking bool
	// MaxMessageChars cuts every message's content to its first so many
	// characters (0: whole), for flood traffic of a given turn size.
	MaxMessageChars int
	// MaxRequests stops after so many requests (0: the whole trace).
	MaxRequests int
}

// Request is one request of a rendered session: the prompt (everything
// before a run of assistant messages), the run as the output, and the
// prompt's messages with their spans.
type Request struct {
	Prompt   []uint32
	Output   []uint32
	Messages []chat.Message
	// Thinking are the spans of the output's thinking, in positions of
	// Prompt+Output (RenderOptions.Thinking).
	Thinking []chat.Span
}

// seq is the session's sequence after the request: its prompt and output.
func (r Request) seq() []uint32 { return append(slices.Clip(r.Prompt), r.Output...) }

// Render turns a trace into its requests, the way policytest.Replay cuts
// it: each run of assistant messages is one request's output.
func Render(tr Trace, o RenderOptions) []Request {
	sess := policytest.NewSession(tr.SessionID, o.Thinking)
	if o.System != "" {
		sess.Append(chat.Message{Role: "system", Content: o.System})
	}
	if o.Tag != "" {
		sess.Append(chat.Message{Role: "user", Content: o.Tag})
	}
	msgs := tr.Messages
	var out []Request
	for i := 0; i < len(msgs); {
		if msgs[i].Role != "assistant" {
			sess.Append(cut(msgs[i], o.MaxMessageChars))
			i++
			continue
		}
		if o.MaxRequests > 0 && len(out) >= o.MaxRequests {
			break
		}
		r := Request{Prompt: sess.Tokens(), Messages: sess.Messages()}
		first := len(r.Messages)
		for ; i < len(msgs) && msgs[i].Role == "assistant"; i++ {
			sess.Append(cut(msgs[i], o.MaxMessageChars))
		}
		r.Output = sess.Tokens()[len(r.Prompt):]
		if o.Thinking {
			for _, m := range sess.Messages()[first:] {
				r.Thinking = append(r.Thinking, m.Thinking...)
			}
			if o.StripThinking {
				stripSpans(sess, r.Thinking)
			}
		}
		out = append(out, r)
	}
	return out
}

// stripSpans removes spans from the session, the last first so the
// earlier positions still hold.
func stripSpans(sess *policytest.Session, spans []chat.Span) {
	for _, s := range slices.SortedFunc(slices.Values(spans), func(a, b chat.Span) int { return cmp.Compare(b.Start, a.Start) }) {
		if err := sess.Splice(s.Start, s.End, nil); err != nil {
			panic(fmt.Sprintf("strip thinking %d..%d: %v", s.Start, s.End, err)) // the spans come from the session itself
		}
	}
}

// CutTrace cuts every message of tr to its first n bytes (a rune
// boundary), so a session fits a small engine's context and tiers.
func CutTrace(tr Trace, n int) Trace {
	out := tr
	out.Messages = make([]chat.Message, len(tr.Messages))
	for i, m := range tr.Messages {
		out.Messages[i] = cut(m, n)
	}
	return out
}

func cut(m chat.Message, n int) chat.Message {
	m.Content = cutString(m.Content, n)
	m.ThinkingText = cutString(m.ThinkingText, n)
	return m
}

// cutString keeps s's first n bytes, backing up to a rune boundary.
func cutString(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
