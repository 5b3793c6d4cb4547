package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/host/syncbuf"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

// synthTrace is a small agent session: user task, then turns of an
// assistant tool call and a tool result of resultChars characters, with
// thinking on every assistant message when thinking is set.
func synthTrace(id string, turns, resultChars int, thinking bool) Trace {
	tr := Trace{SessionID: id, Source: "test", Messages: []chat.Message{{Role: "user", Content: "Fix the failing test in " + id + "."}}}
	for t := 0; t < turns; t++ {
		a := chat.Message{Role: "assistant", ToolName: "bash", Content: fmt.Sprintf("pytest -x tests/test_%s_%d.py", id, t)}
		if thinking {
			a.ThinkingText = fmt.Sprintf("Step %d of %s: the failure points at the parser; check the fixture first, then the edge case.", t, id)
		}
		line := fmt.Sprintf("%s line %d of the tool output; ", id, t)
		body := strings.Repeat(line, resultChars/len(line)+1)
		tr.Messages = append(tr.Messages, a, chat.Message{Role: "tool", ToolName: "bash", Content: body[:resultChars]})
	}
	tr.Messages = append(tr.Messages, chat.Message{Role: "assistant", Content: "Done: the test passes."})
	return tr
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// jsonFields marshals v and checks that each dotted path exists.
func jsonFields(t *testing.T, v any, paths ...string) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		var cur any = m
		for _, k := range strings.Split(p, ".") {
			obj, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("JSON %s: %q is not an object", p, k)
			}
			if cur, ok = obj[k]; !ok {
				t.Fatalf("JSON lacks %s: %s", p, b)
			}
		}
	}
	return m
}

// captureHostLog makes rigs log to a buffer, for tests that must tell a
// host limitation from a failure.
func captureHostLog(t *testing.T) *syncbuf.Buffer {
	t.Helper()
	var buf syncbuf.Buffer
	defaultRigLog = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &buf})
	t.Cleanup(func() { defaultRigLog = nil })
	return &buf
}

func TestPinFloodTiny(t *testing.T) {
	vip := synthTrace("vip", 12, 120, false)
	var flood []Trace
	for i := 0; i < 3; i++ {
		flood = append(flood, synthTrace(fmt.Sprint("flood", i), 6, 400, false))
	}
	rep, err := RunPinFlood(ctxFor(t, 240*time.Second), PinFloodParams{VIP: vip, Flood: flood, Shape: Shape{PageSize: 16, SystemTokens: 100, DevicePages: 160}, HostPages: 160,
		Concurrency: 8, FloodFactor: 5, DeviceHigh: 0.5, DeviceLow: 0.3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jsonFields(t, rep, "scenario", "params", "speedup", "sizes.flood_unique_tokens")
	for _, arm := range []string{"baseline", "pinned"} {
		for _, f := range []string{"cached_tokens", "prompt_tokens", "pinned_tokens", "hit_rate", "ttft_ms"} {
			jsonFields(t, rep, "arms."+arm+"."+f)
		}
	}
	if rep.Sizes.FloodUniqueTokens < int64(5*rep.Sizes.CapacityTokens) {
		t.Fatalf("flood of %d unique tokens is under 5x the capacity of %d", rep.Sizes.FloodUniqueTokens, rep.Sizes.CapacityTokens)
	}
	b, p := rep.Arms["baseline"], rep.Arms["pinned"]
	if b.HitRate > 0.01 || b.PinnedTokens != 0 {
		t.Fatalf("baseline after a 5x flood: %+v", b)
	}
	if p.PinnedTokens == 0 || p.PinnedHit < 0.99 || p.LoadedPages == 0 {
		t.Fatalf("pinned arm: %+v", p)
	}
	if rep.Speedup < 2 || !(p.TTFTms < b.TTFTms) {
		t.Fatalf("speedup %.2f (baseline %.1f ms, pinned %.1f ms)", rep.Speedup, b.TTFTms, p.TTFTms)
	}
	var table bytes.Buffer
	if err := JSONTable(rep)(&table); err != nil || !strings.Contains(table.String(), "pinned") {
		t.Fatalf("table: %v\n%s", err, table.String())
	}
}

func TestIdlePauseTiny(t *testing.T) {
	traces := []Trace{synthTrace("a", 6, 800, false), synthTrace("b", 6, 500, false)}
	rep, err := RunIdlePause(ctxFor(t, 60*time.Second), IdlePauseParams{Traces: traces, Sessions: 4, Idle: 3, Turns: 3, Shape: Shape{SystemTokens: 200}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jsonFields(t, rep, "arms.keep.device_pages", "arms.pause.device_bytes_freed", "arms.pause.resume_ttft_ms", "arms.drop.resume_ttft_ms", "device_freed_fraction")
	keep, pause, drop := rep.Arms["keep"], rep.Arms["pause"], rep.Arms["drop"]
	if pause.PausedSessions != 3 || pause.IdleDevicePages != 0 || keep.IdleDevicePages == 0 || pause.DeviceBytesFreed <= 0 {
		t.Fatalf("pause did not free the idle sessions' device pages: keep %+v pause %+v", keep, pause)
	}
	if pause.ResumeLoadedBytes == 0 || pause.HitRate < keep.HitRate || !(drop.HitRate < pause.HitRate) || !(drop.ResumeTTFTms > pause.ResumeTTFTms) {
		t.Fatalf("resume: keep %+v\npause %+v\ndrop %+v", keep, pause, drop)
	}
}

func TestThinkStripTiny(t *testing.T) {
	tr := synthTrace("think", 8, 300, true)
	rep, err := RunThinkStrip(ctxFor(t, 60*time.Second), ThinkStripParams{Trace: tr, Shape: Shape{SystemTokens: 100}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jsonFields(t, rep, "arms.keep.hit_rate", "arms.strip-reprefill.prefill_tokens", "arms.strip-splice.prefill_tokens", "contract_ok")
	if !rep.ContractOK {
		t.Fatalf("contract violated: %+v", rep.Arms)
	}
	sp, re := rep.Arms["strip-splice"], rep.Arms["strip-reprefill"]
	if sp.Splices == 0 || sp.RotatedRows == 0 || !(sp.PrefillTokens < re.PrefillTokens) || rep.ReusedTokens <= 0 {
		t.Fatalf("strip-splice %+v vs strip-reprefill %+v", sp, re)
	}
}

// failOnFillError fails the test when the host logged a failed splice
// fill: the daemon's "splice fill failed" for a background fill, the
// splice error (splice.ErrFill, "replacement fill failed") an edit's
// synchronous splice logs, or the rig's fill stream ending early. The rig's
// reference engine serves fill orders, so each is a fault of the splice
// path; the session it hit re-prefills instead, which skews every splice
// arm's numbers even when the targets are still met.
func failOnFillError(t *testing.T, log *syncbuf.Buffer) {
	t.Helper()
	var bad []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "splice fill failed") || strings.Contains(l, splice.ErrFill.Error()) || strings.Contains(l, "fill stream ended") {
			bad = append(bad, l)
		}
	}
	if len(bad) > 0 {
		t.Errorf("a splice fill failed, though the rig's reference engine serves fill orders: look for the fault in the fill path (host/splice, host/engine/fill.go, examples/refengine/fill.go); host log:\n%s", strings.Join(bad, "\n"))
	}
}

func TestSpliceReplayTiny(t *testing.T) {
	log := captureHostLog(t)
	old := TurnTimeout
	TurnTimeout = 15 * time.Second
	t.Cleanup(func() { TurnTimeout = old })
	rep, err := RunSpliceReplay(ctxFor(t, 90*time.Second), SpliceReplayParams{Answers: synthTrace("answers", 20, 600, false), Turns: 4, AnswerChars: 1200, Shape: Shape{SystemTokens: 200}}, nil)
	failOnFillError(t, log)
	if err != nil {
		t.Fatal(err)
	}
	jsonFields(t, rep, "arms.cache-off.hit_rate", "arms.radix.prefill_tokens", "arms.splice.hit_rate", "arms.splice.prefill_tokens", "contract_ok")
	if !rep.ContractOK {
		t.Fatalf("contract violated: %+v", rep.Arms)
	}
	off, radix, sp := rep.Arms["cache-off"], rep.Arms["radix"], rep.Arms["splice"]
	if off.HitRate != 0 || !(radix.HitRate > 0) {
		t.Fatalf("cache-off %+v radix %+v", off, radix)
	}
	if !rep.Targets.Met {
		t.Fatalf("splice %+v radix %+v\nhost log:\n%s", sp, radix, log.String())
	}
	if sp.RotatedRows == 0 {
		t.Fatalf("the replay checked no rotated key: %+v", sp)
	}
}

func TestTruncationTiny(t *testing.T) {
	log := captureHostLog(t)
	rep, err := RunTruncation(ctxFor(t, 90*time.Second), TruncationParams{EditedSessions{Traces: []Trace{synthTrace("trunc", 8, 1200, false)}, Shape: Shape{SystemTokens: 200}}}, nil)
	failOnFillError(t, log)
	if err != nil {
		t.Fatal(err)
	}
	jsonFields(t, rep, "arms.reprefill.prefill_tokens", "arms.splice.prefill_tokens", "saved", "contract_ok")
	if !rep.ContractOK || rep.Edits == 0 {
		t.Fatalf("contract %v, %d edits", rep.ContractOK, rep.Edits)
	}
	if !rep.Targets.Met {
		t.Fatalf("saved %.2f: %+v\nhost log:\n%s", rep.Saved, rep.Arms, log.String())
	}
}

func TestSVG(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSVG(&b, "t <&>", []Chart{{Title: "hit", Unit: "%", Bars: []Bar{{"a", 50}, {"b", 0}}}, {Title: "empty"}}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.HasPrefix(s, "<svg") || !strings.Contains(s, "t &lt;&amp;&gt;") || strings.Count(s, "<rect") != 3 {
		t.Fatalf("svg:\n%s", s)
	}
}

func TestLoadTracesMissing(t *testing.T) {
	t.Setenv(policytest.TracesEnv, t.TempDir())
	if _, err := LoadTraces("no-such-trace.jsonl"); err == nil || !strings.Contains(err.Error(), policytest.TracesEnv) {
		t.Fatalf("missing trace: %v", err)
	}
}

// The gateway scenario: the three arms through the front door over HTTP,
// with the engine's contract check on every cached row.
func TestGatewayTiny(t *testing.T) {
	log := captureHostLog(t)
	rep, err := RunGateway(ctxFor(t, 120*time.Second), GatewayParams{EditedSessions: EditedSessions{Traces: []Trace{synthTrace("gw", 8, 1200, true)}, Shape: Shape{SystemTokens: 200}},
		TimeScale: 0.01}, nil)
	failOnFillError(t, log)
	if err != nil {
		t.Fatal(err)
	}
	jsonFields(t, rep, "arms.prefix-cache.prefill_tokens", "arms.edits-reprefill.ttft_ms.p50", "arms.edits-splice.fill_tokens", "saved", "targets.met")
	for _, arm := range gatewayArms {
		if a := rep.Arms[arm]; !a.ContractOK || a.Requests != 9 {
			t.Fatalf("%s: %+v", arm, a)
		}
	}
	if rep.Arms[ArmEditsSplice].EditedRequests == 0 || rep.EditCost[ArmEditsReprefill] <= 0 {
		t.Fatalf("no edits to pay for: %+v", rep.Arms)
	}
	if !rep.Targets.Met {
		t.Fatalf("saved %.2f: %+v\nhost log:\n%s", rep.Saved, rep.Arms, log.String())
	}
}
