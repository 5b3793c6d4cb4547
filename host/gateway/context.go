package gateway

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// contextManagement is a request's context_management: Anthropic's
// edits, checked against the installed anthropic SDK's beta types
// (BetaClearToolUses20250919EditParam, BetaClearThinking20251015EditParam).
type contextManagement struct {
	Edits []editSpec `json:"edits"`
}

type editSpec struct {
	Type         string     `json:"type"`
	Trigger      *threshold `json:"trigger"`
	ClearAtLeast *threshold `json:"clear_at_least"`
	ExcludeTools []string   `json:"exclude_tools"`
	// Keep is {type: tool_uses, value} for tool uses; {type:
	// thinking_turns, value}, {type: all} or "all" for thinking.
	Keep json.RawMessage `json:"keep"`
	// ClearToolInputs is a bool or a list of tool names.
	ClearToolInputs json.RawMessage `json:"clear_tool_inputs"`
}

type threshold struct {
	Type  string `json:"type"`
	Value *int64 `json:"value"`
}

// Defaults of Anthropic's clear_tool_uses_20250919 and
// clear_thinking_20251015 when a field is omitted.
const (
	defaultTriggerTokens = 100000
	defaultKeepToolUses  = 3
	defaultKeepThinking  = 1
)

// Placeholder is what a cleared tool result becomes under a request's own
// clear_tool_uses edit.
const Placeholder = "[tool result cleared by context management]"

// rules turns the request's edits into Rules; nil when the request
// carried no context_management (the policies' rules apply then).
func (c *contextManagement) rules() (*Rules, error) {
	if c == nil {
		return nil, nil
	}
	var r Rules
	for i, e := range c.Edits {
		var err error
		switch e.Type {
		case EditClearToolUses:
			r.Tools, err = e.toolRule()
		case EditClearThinking:
			r.Think, err = e.thinkRule()
		case "":
			err = errcode.New(errcode.MissingField, "type")
		default:
			err = errcode.New(errcode.NotSupportedYet, "edit type %s: this front door applies %s and %s", quote(e.Type), EditClearToolUses, EditClearThinking)
		}
		if err != nil {
			return nil, errcode.Wrap(errcode.From(err).Code, err, "context_management.edits[%d]", i)
		}
	}
	return &r, nil
}

func (e editSpec) toolRule() (*ToolRule, error) {
	r := &ToolRule{TriggerType: "input_tokens", TriggerValue: defaultTriggerTokens, Keep: defaultKeepToolUses, OlderThan: -1,
		Exclude: lowerSet(e.ExcludeTools), Replace: func(content string) string {
			if content == Placeholder {
				return ""
			}
			return Placeholder
		}}
	if t := e.Trigger; t != nil {
		if err := t.check("trigger", "input_tokens", "tool_uses"); err != nil {
			return nil, err
		}
		r.TriggerType, r.TriggerValue = t.Type, *t.Value
	}
	if t := e.ClearAtLeast; t != nil {
		if err := t.check("clear_at_least", "input_tokens"); err != nil {
			return nil, err
		}
		r.ClearAtLeast = *t.Value
	}
	if len(e.Keep) > 0 && string(e.Keep) != "null" {
		var t threshold
		if err := json.Unmarshal(e.Keep, &t); err != nil {
			return nil, errcode.FromJSON(err, "keep")
		}
		if err := t.check("keep", "tool_uses"); err != nil {
			return nil, err
		}
		r.Keep = int(*t.Value)
	}
	ci := bytes.TrimSpace(e.ClearToolInputs)
	switch {
	case len(ci) == 0 || string(ci) == "null" || string(ci) == "false":
	case string(ci) == "true":
		r.ClearInputs = true
	default:
		var names []string
		if err := json.Unmarshal(ci, &names); err != nil {
			return nil, errcode.New(errcode.BadRequest, "clear_tool_inputs: want a bool or a list of tool names")
		}
		r.ClearInputs, r.InputsOf = true, lowerSet(names)
		if r.InputsOf == nil {
			r.ClearInputs = false
		}
	}
	return r, nil
}

func (e editSpec) thinkRule() (*ThinkRule, error) {
	r := &ThinkRule{Keep: defaultKeepThinking}
	k := bytes.TrimSpace(e.Keep)
	switch {
	case len(k) == 0 || string(k) == "null":
	case string(k) == `"all"`:
		r.Keep = -1
	default:
		var t threshold
		if err := json.Unmarshal(k, &t); err != nil {
			return nil, errcode.FromJSON(err, "keep")
		}
		if t.Type == "all" {
			r.Keep = -1
			break
		}
		if err := t.check("keep", "thinking_turns"); err != nil {
			return nil, err
		}
		r.Keep = int(*t.Value)
	}
	return r, nil
}

func (t threshold) check(field string, types ...string) error {
	ok := false
	for _, ty := range types {
		ok = ok || t.Type == ty
	}
	switch {
	case !ok:
		return errcode.New(errcode.BadRequest, "%s.type %s: want %s", field, quote(t.Type), strings.Join(types, " or "))
	case t.Value == nil:
		return errcode.New(errcode.MissingField, "%s.value", field)
	case *t.Value < 0:
		return errcode.New(errcode.BadRequest, "%s.value %d: want >= 0", field, *t.Value)
	}
	return nil
}
