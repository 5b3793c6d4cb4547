package main

import (
	"testing"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

func TestRetainsSystemPromptOnce(t *testing.T) {
	h := policytest.New(t, &retainSystem{}, map[string]any{"priority": 90, "duration": "5m"})
	obs := policy.Observation{Kind: policy.KindRequestStarted, Session: "s1", Started: &policy.RequestStarted{Messages: []chat.Message{
		{Role: "system", Span: chat.Span{Start: 3, End: 4000}}, {Role: "user", Span: chat.Span{Start: 4004, End: 4100}},
	}}}
	ds := h.Observe(obs)
	r, ok := ds[0].(directive.Retain)
	if len(ds) != 1 || !ok || r.End != 4000 || r.Priority != 90 || r.Duration.Duration().Minutes() != 5 {
		t.Fatalf("directives %v", ds)
	}
	if ds := h.Observe(obs); len(ds) != 0 {
		t.Fatalf("retained twice: %v", ds)
	}
	if _, err := policytest.Start(t, &retainSystem{}, map[string]any{"priority": 101}); err == nil {
		t.Fatal("priority 101 accepted")
	}
}
