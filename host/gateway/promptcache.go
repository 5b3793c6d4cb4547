package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// OpenAI's prompt caching fields in a chat completions request, as the
// pinned openai SDK's types write them, become the same breakpoints as
// Anthropic's cache_control (pins of the session's prefix through a
// message, with a TTL that pins.min_ttl and pins.max_ttl clamp):
//
//   - prompt_cache_breakpoint {"mode": "explicit", "ttl"?: "30m" | "12h"}
//     on a content part: a breakpoint at the end of its message (a pin
//     covers whole pages, never part of one), with the part's TTL or the
//     request's;
//   - prompt_cache_options {"mode"?: "implicit" | "explicit", "ttl"?:
//     "30m"}: the request's TTL (30m by default); implicit, the default,
//     adds a breakpoint at the end of the prompt, explicit only the parts'
//     own;
//   - prompt_cache_retention "24h": a breakpoint at the end of the prompt
//     kept 24 hours; "in_memory" pins nothing (the cache keeps what it
//     keeps).
//
// A request with none of them pins nothing: OpenAI caches every prompt
// implicitly, and kvpilot caches every prompt too, but pins only what a
// client asked to keep. The fields are the front door's: they are not
// forwarded.

// defaultPromptCacheTTL is prompt_cache_options.ttl's default.
const defaultPromptCacheTTL = "30m"

type promptCacheOptions struct {
	Mode string `json:"mode"`
	TTL  string `json:"ttl"`
}

type promptCacheBreakpoint struct {
	Mode string `json:"mode"`
	TTL  string `json:"ttl"`
}

// openAIBreakpoints reads the request's prompt caching fields into
// breakpoints and removes the top-level ones from raw.
func openAIBreakpoints(raw map[string]json.RawMessage, nmsgs int) ([]breakpoint, error) {
	var opts *promptCacheOptions
	if b, ok := raw["prompt_cache_options"]; ok && !isNull(b) {
		opts = &promptCacheOptions{}
		if err := json.Unmarshal(b, opts); err != nil {
			return nil, errcode.Wrap(errcode.BadRequest, errcode.FromJSON(err, ""), "prompt_cache_options")
		}
		if opts.Mode != "" && opts.Mode != "implicit" && opts.Mode != "explicit" {
			return nil, errcode.New(errcode.BadRequest, "prompt_cache_options.mode %s: want \"implicit\" or \"explicit\"", quote(opts.Mode))
		}
	}
	var retention string
	if b, ok := raw["prompt_cache_retention"]; ok && !isNull(b) {
		if err := json.Unmarshal(b, &retention); err != nil || (retention != "in_memory" && retention != "24h") {
			return nil, errcode.New(errcode.BadRequest, "prompt_cache_retention %s: want \"in_memory\" or \"24h\"", string(b))
		}
	}
	delete(raw, "prompt_cache_options")
	delete(raw, "prompt_cache_retention")
	reqTTL := defaultPromptCacheTTL
	if opts != nil && opts.TTL != "" {
		reqTTL = opts.TTL
	}
	breaks, err := partBreakpoints(raw["messages"], reqTTL)
	if err != nil {
		return nil, err
	}
	last := nmsgs - 1
	if opts != nil && opts.Mode != "explicit" {
		b, err := newBreakpoint(last, reqTTL, "prompt_cache_options.ttl")
		if err != nil {
			return nil, err
		}
		breaks = append(breaks, b)
	}
	if retention == "24h" {
		b, _ := newBreakpoint(last, "24h", "prompt_cache_retention")
		breaks = append(breaks, b)
	}
	return breaks, nil
}

// partBreakpoints reads the prompt_cache_breakpoint of every content part.
func partBreakpoints(msgs json.RawMessage, reqTTL string) ([]breakpoint, error) {
	var wire []struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(msgs, &wire); err != nil {
		return nil, nil // ParseOpenAI has read them already: not a list of parts
	}
	var out []breakpoint
	for i, m := range wire {
		c := bytes.TrimSpace(m.Content)
		if len(c) == 0 || c[0] != '[' {
			continue
		}
		var parts []struct {
			Breakpoint *promptCacheBreakpoint `json:"prompt_cache_breakpoint"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return nil, errcode.Wrap(errcode.BadRequest, errcode.FromJSON(err, ""), "messages[%d].content", i)
		}
		for j, p := range parts {
			if p.Breakpoint == nil {
				continue
			}
			where := "messages[" + strconv.Itoa(i) + "].content[" + strconv.Itoa(j) + "].prompt_cache_breakpoint"
			if p.Breakpoint.Mode != "explicit" {
				return nil, errcode.New(errcode.BadRequest, "%s.mode %s: the only mode is \"explicit\"", where, quote(p.Breakpoint.Mode))
			}
			ttl := p.Breakpoint.TTL
			if ttl == "" {
				ttl = reqTTL
			}
			b, err := newBreakpoint(i, ttl, where+".ttl")
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
	}
	return out, nil
}

// newBreakpoint is a breakpoint through message msg kept ttl, with the
// cache_control a connector engine reads when the front door cannot place
// the pin itself (forwardBody).
func newBreakpoint(msg int, ttl, where string) (breakpoint, error) {
	d, err := enginewire.ParseTTL(ttl)
	if err != nil {
		return breakpoint{}, errcode.Wrap(errcode.InvalidTTL, errcode.From(err).Err, "%s", where)
	}
	// Whole seconds: the grammar every kvpilot front end reads.
	raw, _ := json.Marshal(map[string]string{"type": "ephemeral", "ttl": strconv.FormatInt(int64(d/time.Second), 10)})
	return breakpoint{Msg: msg, TTL: d, Raw: raw}, nil
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }
