package thinkevict

import (
	"path/filepath"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

// The Opus session is the one trace with reasoning; rendered as
// <think>…</think> inside the assistant turns, as Qwen3-style templates do.
const opus = "spotter_258c7280-ae70-4798-800f-63464d01a85d.jsonl"

func TestTraceGolden(t *testing.T) {
	trs, err := policytest.LoadNamedTraces(opus)
	if err != nil {
		t.Fatalf("the repository's traces: %v", err)
	}
	h := policytest.New(t, New(), map[string]any{"keep": 1})
	res, err := policytest.Replay(h, trs[0], policytest.ReplayOptions{RenderThinking: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.ByVerb["Splice"] == 0 || res.Stats.ByVerb["Think"] == 0 {
		t.Fatalf("stats %+v: want splices of old reasoning and transient marks", res.Stats)
	}
	// Every reasoning block but the newest turn's is gone.
	turns := 0
	for _, m := range res.Final.Messages() {
		if len(m.Thinking) > 0 {
			turns++
		}
	}
	if turns > 1 {
		t.Fatalf("%d messages still hold reasoning, want at most 1", turns)
	}
	policytest.Golden(t, filepath.Join("testdata", "spotter-opus.golden"), res.JSON())
}

func TestKeepAndTransient(t *testing.T) {
	msgs := []chat.Message{
		{Role: "user", Span: chat.Span{Start: 2, End: 10}},
		{Role: "assistant", Span: chat.Span{Start: 12, End: 40}, Thinking: []chat.Span{{Start: 12, End: 30}}},
		{Role: "user", Span: chat.Span{Start: 42, End: 50}},
		{Role: "assistant", Span: chat.Span{Start: 52, End: 80}, Content: "<think>all reasoning</think>"},
		{Role: "user", Span: chat.Span{Start: 82, End: 90}},
		{Role: "assistant", Span: chat.Span{Start: 92, End: 120}, Thinking: []chat.Span{{Start: 92, End: 100}}},
	}
	obs := policy.Observation{Kind: policy.KindRequestStarted, Session: "s", Started: &policy.RequestStarted{Messages: msgs}}
	h := policytest.New(t, New(), map[string]any{"keep": 1, "placeholder": "[thought]"})
	ds := h.Observe(obs)
	if len(ds) != 2 || ds[0].(directive.Splice).Start != 12 || ds[1].(directive.Splice).Start != 52 || ds[1].(directive.Splice).End != 80 {
		t.Fatalf("directives %v: want the two older reasoning spans, left to right", ds)
	}
	fin := policy.Observation{Kind: policy.KindRequestFinished, Session: "s", Finished: &policy.RequestFinished{ReasoningBlocks: []uint64{7, 8}}}
	ds = h.Observe(fin)
	if th, ok := ds[0].(directive.Think); len(ds) != 1 || !ok || !th.Transient || len(th.BlockHashes) != 2 {
		t.Fatalf("directives %v: want one transient mark", ds)
	}
	off := policytest.New(t, New(), map[string]any{"transient": false, "keep": 0})
	if ds := off.Observe(fin); len(ds) != 0 {
		t.Fatalf("transient off still marked: %v", ds)
	}
	if ds := off.Observe(obs); len(ds) != 3 {
		t.Fatalf("keep 0: %d splices, want 3", len(ds))
	}
}

func TestFindThinkSpans(t *testing.T) {
	s := "a<think>x</think>b<think>open"
	sp := policy.FindThinkSpans(s)
	if len(sp) != 2 || s[sp[0][0]:sp[0][1]] != "<think>x</think>" || s[sp[1][0]:sp[1][1]] != "<think>open" {
		t.Fatalf("spans %v", sp)
	}
}
