package gateway

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/sdk/chat"
)

// lateSaves is a connector engine whose session s1 holds a short sequence
// until the previous turn's saves land (at; zero: never), then old.
type lateSaves struct {
	*connectorEngine
	mu sync.Mutex
	at time.Time
}

func (e *lateSaves) land(after time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at = time.Now().Add(after)
}

func (e *lateSaves) SessionTokens(_, session string) ([]uint32, int, bool) {
	if session != "s1" {
		return nil, 0, false
	}
	e.mu.Lock()
	landed := !e.at.IsZero() && time.Now().After(e.at)
	e.mu.Unlock()
	if !landed {
		return e.old[:prefillPage-1], 0, true
	}
	return e.old, len(e.old) / prefillPage * prefillPage, true
}

// awaitSavesGateway runs two turns of s1: a plain one (the engine reports
// its prompt tokens), then one that clears every tool result, sent as the
// previous turn's saves land after land (never when negative).
func awaitSavesGateway(t *testing.T, wait, land time.Duration) (*recordedDirectives, *metrics.Gateway) {
	t.Helper()
	history := append(conversation(1), chat.Message{Role: "user", Content: "now explain what the output says, at length, line by line"})
	up := &connectorUpstream{fakeUpstream: fakeUpstream{mode: "ok"}}
	eng := &lateSaves{connectorEngine: &connectorEngine{old: render(history), up: up}}
	dirs := &recordedDirectives{}
	m := &metrics.New().Gateway
	g := New(Config{Upstream: httptestServer(t, up) + "/v1", Timeout: 2 * time.Second, Engine: eng, Metrics: m, AwaitSaves: wait}, dirs)
	gw := httptestServer(t, g.Handler())
	if code, b := post(t, gw+"/v1/chat/completions", chatBody(t, history), SessionHeader, "s1"); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	if land >= 0 {
		eng.land(land)
	}
	next := append(slices.Clone(history), chat.Message{Role: "assistant", Content: "it lists files"},
		chat.Message{Role: "user", Content: "thanks"})
	if code, b := post(t, gw+"/v1/chat/completions", clearBody(t, next), SessionHeader, "s1"); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	return dirs, m
}

// An edited turn that comes before its session's previous saves have
// landed waits for them, and splices what they saved.
func TestEditedTurnWaitsForThePreviousSaves(t *testing.T) {
	dirs, m := awaitSavesGateway(t, 2*time.Second, 100*time.Millisecond)
	if len(dirs.turns) != 1 {
		t.Fatalf("directives %v, want one splice once the saves landed", dirs.turns)
	}
	if n := counted(t, m.SaveWaits.WithLabelValues(outcomeWaited)); n != 1 {
		t.Fatalf("%v turns counted as waited, want 1", n)
	}
	if s := counted(t, m.SaveWaitSeconds); s < 0.09 {
		t.Fatalf("waited %.3fs in all, want about the 0.1s the saves took", s)
	}
}

// The wait is bounded: saves that never land leave the turn as it would be
// without the splice (forwarded, the engine prefills after the edit), and
// the turn counts as given up.
func TestEditedTurnGivesUpOnSavesThatNeverLand(t *testing.T) {
	dirs, m := awaitSavesGateway(t, 50*time.Millisecond, -1)
	if len(dirs.turns) != 0 {
		t.Fatalf("directives %v, want none", dirs.turns)
	}
	if n := counted(t, m.SaveWaits.WithLabelValues(outcomeGaveUp)); n != 1 {
		t.Fatalf("%v turns counted as given up, want 1", n)
	}
}

// With gateway.await_saves 0 the turn does not wait.
func TestAwaitSavesOffDoesNotWait(t *testing.T) {
	dirs, m := awaitSavesGateway(t, 0, 100*time.Millisecond)
	if len(dirs.turns) != 0 {
		t.Fatalf("directives %v, want none: the saves had not landed", dirs.turns)
	}
	if n := counted(t, m.SaveWaitSeconds); n != 0 {
		t.Fatalf("waited %vs with the wait off", n)
	}
}

func chatBody(t *testing.T, msgs []chat.Message) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
