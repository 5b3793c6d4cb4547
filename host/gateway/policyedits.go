package gateway

import (
	"encoding/json"
	"fmt"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/policies/thinkevict"
	"github.com/kvpilot/kvpilot/policies/truncation"
)

// PolicyRules derives the edits of requests without context_management
// from the host's configured policies: the truncation policy's rule
// becomes a ToolRule with its stub or placeholder, think-evict's keep
// becomes a ThinkRule. The front door applies them to the messages, with
// the same rules the policies apply to the cache, so the engine's session
// diff and the policies agree on what was edited (a message the host
// spliced is reported Edited and the policy leaves it).
func PolicyRules(ps []config.Policy) (Rules, error) {
	var r Rules
	for _, p := range ps {
		raw, err := json.Marshal(p.Params)
		if err != nil {
			return r, fmt.Errorf("policy %s params: %w", p.Name, err)
		}
		switch p.Builtin {
		case truncation.Name:
			if r.Tools, err = truncationRule(raw); err != nil {
				return r, fmt.Errorf("policy %s: %w", p.Name, err)
			}
		case thinkevict.Name:
			if r.Think, err = thinkRule(raw); err != nil {
				return r, fmt.Errorf("policy %s: %w", p.Name, err)
			}
		}
	}
	return r, nil
}

func truncationRule(raw []byte) (*ToolRule, error) {
	var p truncation.Params
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, err
		}
	}
	r := &ToolRule{OlderThan: 2, Exclude: lowerSet(p.ExcludeTools), Only: lowerSet(p.Tools), ClearInputs: p.ClearToolInputs}
	if p.OlderThan != nil {
		r.OlderThan = *p.OlderThan
	}
	if p.Trigger != nil {
		r.TriggerType, r.TriggerValue = p.Trigger.Type, p.Trigger.Value
	}
	if p.Keep != nil {
		r.Keep = int(p.Keep.Value)
	}
	if p.ClearAtLeast != nil {
		r.ClearAtLeast = p.ClearAtLeast.Value
	}
	maxChars := p.MaxChars
	if maxChars == 0 {
		maxChars = 200
	}
	placeholder := p.Placeholder
	r.Replace = func(content string) string {
		if placeholder != "" {
			if content == placeholder {
				return ""
			}
			return placeholder
		}
		return truncation.Stub(content, maxChars)
	}
	return r, nil
}

func thinkRule(raw []byte) (*ThinkRule, error) {
	var p thinkevict.Params
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, err
		}
	}
	r := &ThinkRule{Keep: 1, Placeholder: p.Placeholder}
	if p.Keep != nil {
		r.Keep = *p.Keep
	}
	return r, nil
}
