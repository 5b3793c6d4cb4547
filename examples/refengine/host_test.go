package refengine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/policies"
	"github.com/kvpilot/kvpilot/policies/truncation"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

// These tests run the reference engine against a real host built by
// daemon.New (`kvpilot serve`), in this process: the index, executor,
// Control socket, policy plugins (this test binary re-executed as
// `kvpilot policy NAME`) and the engine service with its splicer. The
// cross-process path is covered by the tests beside this one.

// maybePolicyMain runs a built-in policy when the host started this binary
// as a policy plugin.
func maybePolicyMain() {
	if len(os.Args) != 3 || os.Args[1] != "policy" {
		return
	}
	p, err := policies.New(os.Args[2])
	if err == nil {
		err = policy.Run(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

const hostPage = 16

// startDaemon runs a host without a configured model (the pools open when
// the engine registers) and returns it with its config.
func startDaemon(t *testing.T, mod func(*config.Config), opts ...daemon.Option) (*daemon.Daemon, config.Config) {
	t.Helper()
	c := config.Default()
	c.DataDir = t.TempDir()
	c.HTTP.Listen = ""
	c.NATS.Listen = ""
	c.Index.PageSize = hostPage
	c.Tiers.Device.CapacityPages = 256
	c.Tiers.Host.CapacityPages = 1024
	c.Tiers.Disk.CapacityPages = 0
	c.Tiers.Remote.CapacityPages = 0
	c.Mover.StepInterval = 10 * time.Millisecond
	c.PolicyRuntime.TickInterval = time.Second
	if mod != nil {
		mod(&c)
	}
	d, err := daemon.New(c, hclog.NewNullLogger(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("host Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("host did not stop within 15s")
		}
	})
	return d, c
}

// engineWithFills registers a reference engine and serves its fill orders.
func engineWithFills(t *testing.T, socket string, m refengine.Model) (*refengine.Engine, *refengine.FillServer) {
	t.Helper()
	e := newEngine(t, socket, m)
	f := &refengine.FillServer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f.ServeFills(ctx, e); err != nil {
			t.Errorf("fill stream: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return e, f
}

// waitCached waits until the host's index holds the full pages of toks on
// the device (a splice's fills are committed in the background).
func waitCached(t *testing.T, d *daemon.Daemon, tenant string, toks []uint32) {
	t.Helper()
	h := blockid.Compute(toks[:len(toks)/hostPage*hostPage], hostPage, blockid.Salt{Namespace: tenant})
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := 0
		d.Index().Do(func(ix *cache.Index) {
			for _, s := range h.Sequence {
				if p, ok := ix.Lookup(tenant, s); !ok || !p.Tiers.Has(tier.Device) {
					break
				}
				n++
			}
		})
		if n == len(h.Sequence) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of the %d full pages of the edited sequence are cached", n, len(h.Sequence))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A Splice directive sent on the Control socket edits a session's cache:
// the downstream keys are rotated in place or moved, the engine receives a
// fill order for the replacement, and the engine's next turn on the edited
// history hits every full page, rotated keys passing the contract check.
func TestSpliceDirectiveThroughTheControlSocket(t *testing.T) {
	for _, m := range []refengine.Model{refengine.GQA(hostPage), refengine.MLA(hostPage)} {
		t.Run(m.Attention, func(t *testing.T) {
			d, c := startDaemon(t, nil)
			e, fills := engineWithFills(t, c.EngineSocket(), m)
			g := &tokens{next: 17}
			conversation(t, e, "s", g, 3, 40, 20)
			sess, ok := d.Engine().Session("s")
			if !ok {
				t.Fatal("the host does not know the session")
			}
			ctl, err := controlclient.DialUnix(c.ControlSocket(), controlclient.UnixOptions{Source: "harness"})
			if err != nil {
				t.Fatal(err)
			}
			defer ctl.Close()
			repl := g.take(5) // [20, 31) → 5 tokens: Δ = -6, not page aligned
			reply, err := ctl.Apply(ctxT(t), directive.Turn{Directives: []directive.Directive{
				directive.Splice{Session: "s", Start: 20, End: 31, Replacement: directive.Replacement{Tokens: repl}, Mode: directive.ModeAmortize},
			}})
			if err != nil || !reply.OK() {
				t.Fatalf("splice: %+v %v", reply, err)
			}
			edited := append(append(slices.Clone(sess.Tokens[:20]), repl...), sess.Tokens[31:]...)
			waitCached(t, d, "", edited)
			if fills.Orders.Load() != 1 || fills.Tokens.Load() != 5 {
				t.Fatalf("engine filled %d orders (%d tokens), want 1 of 5", fills.Orders.Load(), fills.Tokens.Load())
			}
			next := append(slices.Clone(edited), g.take(30)...)
			st, err := e.Run(ctxT(t), refengine.TurnRequest{Session: "s", Tokens: next})
			if err != nil {
				t.Fatalf("turn after the splice: %v", err)
			}
			if want := len(edited) / hostPage * hostPage; st.Cached != want || st.RoundedRows == 0 {
				t.Fatalf("turn after the splice cached %d of %d (want %d), %d rotated rows checked", st.Cached, st.Prompt, want, st.RoundedRows)
			}
		})
	}
}

// With index.auto_splice on, a harness that edits an early message of its
// history and appends a turn gets the cache spliced by session diff
// before its Match: the request hits past the edit instead of
// re-prefilling everything after it. It runs against the daemon in this
// process, and against a host in a child process (the fill written through
// the passed descriptors, the rotation done by the host in its mapping).
func TestAutoSpliceReplaysAnEditedHistory(t *testing.T) {
	t.Run("daemon", func(t *testing.T) {
		d, c := startDaemon(t, func(c *config.Config) { c.Index.AutoSplice = true })
		replayEdited(t, c.EngineSocket())
		if got := d.Engine().Stats().AutoSplices; got != 1 {
			t.Fatalf("%d session-diff splices, want 1", got)
		}
	})
	t.Run("child-process", func(t *testing.T) {
		p := spawn(t, enginetest.Options{PageSize: hostPage, DevicePages: 128, SinkTokens: 4, AutoSplice: true})
		replayEdited(t, p.Socket)
	})
}

func replayEdited(t *testing.T, socket string) {
	e, fills := engineWithFills(t, socket, refengine.GQA(hostPage))
	long := strings.Repeat("the quick brown fox jumps over the lazy dog; ", 8)
	build := func(topic string, extra bool) *policytest.Session {
		s := policytest.NewSession("r", false)
		s.Append(chat.Message{Role: "system", Content: "You are a careful assistant. " + long})
		s.Append(chat.Message{Role: "user", Content: "Tell me about " + topic + ". " + long})
		s.Append(chat.Message{Role: "assistant", Content: "Here is what I know. " + long})
		s.Append(chat.Message{Role: "user", Content: "And more, please. " + long})
		if extra {
			s.Append(chat.Message{Role: "assistant", Content: "Certainly. " + long})
		}
		return s
	}
	run := func(s *policytest.Session) refengine.TurnStats {
		t.Helper()
		st, err := e.Run(ctxT(t), refengine.TurnRequest{Session: "r", Tokens: s.Tokens(), Messages: s.Messages()})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	run(build("owls", false))
	edited := build("big bats", true) // an early word edited (Δ = +1 token), a turn appended
	msgs := edited.Messages()
	st := run(edited)
	editAt := int(msgs[1].Span.Start)
	if fills.Orders.Load() == 0 {
		t.Fatal("no fill order: the host did not splice the edit")
	}
	// Everything of the previous request past the edit is a hit; only the
	// appended message (and the partial last page) is prefilled.
	if old := int(msgs[4].Span.Start) / hostPage * hostPage; st.Cached < old-hostPage || st.Cached <= editAt+hostPage || st.RoundedRows == 0 {
		t.Fatalf("replay cached %d of %d tokens (edit at %d, appended turn at %d), %d rotated rows", st.Cached, st.Prompt, editAt, msgs[4].Span.Start, st.RoundedRows)
	}
}

// The truncation policy, running as a plugin process, sees the engine's
// requests with their message spans, stubs an old tool result with a
// splice, and the host applies it (the stub tokenized by the host's
// tokenizer, the fill ordered from the engine). The harness then sends its
// history with the stub, and the next turn hits past the edit.
func TestTruncationPolicySplicesRealTraffic(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]any{"older_than": 1, "max_chars": 40, "tools": []string{"bash"}}
	d, c := startDaemon(t, func(c *config.Config) {
		c.Policies = []config.Policy{{Name: "trunc", Builtin: truncation.Name, Params: params}}
	}, daemon.WithPolicyExecutable(exe), daemon.WithTokenizer(func(s string) ([]uint32, error) { return policytest.Tokenize(s), nil }))
	e, fills := engineWithFills(t, c.EngineSocket(), refengine.GQA(hostPage))

	output := strings.Repeat("drwxr-xr-x 2 root root 4096 Nov 21 23:20 some-directory-name\n", 12)
	s := policytest.NewSession("agent", false)
	s.Append(chat.Message{Role: "system", Content: "You are a coding agent with a bash tool. Keep answers short and precise."})
	s.Append(chat.Message{Role: "user", Content: "List the files of the repository and tell me what is there."})
	s.Append(chat.Message{Role: "assistant", ToolName: "bash", Content: "ls -la"})
	s.Append(chat.Message{Role: "tool", ToolName: "bash", Content: output})
	s.Append(chat.Message{Role: "assistant", Content: "The repository holds twelve directories of source code."})
	run := func() refengine.TurnStats {
		t.Helper()
		st, err := e.Run(ctxT(t), refengine.TurnRequest{Session: "agent", Tokens: s.Tokens(), Messages: s.Messages()})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	run() // the tool result has one assistant turn after it: kept
	first := s.Tokens()
	s.Append(chat.Message{Role: "user", Content: "Which of them holds the tests?"})
	s.Append(chat.Message{Role: "assistant", Content: "The directory named tests, as usual for this layout."})
	s.Append(chat.Message{Role: "user", Content: "Thanks. Now summarize the layout in one line."})
	before := s.Messages()
	prev := s.Tokens()
	run() // two assistant turns after it now: the policy stubs it

	// The policy's edit, as the harness learns it (here: the same policy
	// run on the same observation), applied to the harness's history.
	p := truncation.New()
	raw, _ := json.Marshal(params)
	if err := p.Configure(raw); err != nil {
		t.Fatal(err)
	}
	dirs, err := p.Observe(context.Background(), policy.Observation{Time: time.Now(), Kind: policy.KindRequestStarted, Session: "agent",
		Started: &policy.RequestStarted{RequestID: "r", Turn: 1, PromptTokens: int64(len(prev)), PageSize: hostPage, Messages: before}})
	if err != nil || len(dirs) != 1 {
		t.Fatalf("the policy on this history: %v %v", dirs, err)
	}
	sp := dirs[0].(directive.Splice)
	if sp.Start != before[3].Span.Start || sp.End != before[3].Span.End {
		t.Fatalf("policy splice %+v is not the tool result's span %+v", sp, before[3].Span)
	}
	waitAudit(t, filepath.Join(c.DataDir, "audit.log"), "trunc", directive.VerbSplice)
	stub := policytest.Tokenize(sp.Replacement.Text)
	if err := s.Splice(sp.Start, sp.End, stub); err != nil {
		t.Fatal(err)
	}
	// The host edited the cached sequence of the request the policy saw
	// (or of the one before it, when the splice landed before that
	// request committed): either way its full pages are cached.
	delta := len(stub) - int(sp.End-sp.Start)
	branch := waitForEither(t, d, delta, slices.Concat(first[:sp.Start], stub, first[sp.End:]), len(first), s.Tokens(), len(prev))
	if fills.Orders.Load() == 0 {
		t.Fatal("the engine got no fill order for the stub")
	}
	s.Append(chat.Message{Role: "assistant", Content: "Sources, tests and docs, each in its own directory."})
	st := run()
	if st.Cached < branch || st.Cached <= int(sp.Start)+len(stub) || st.RoundedRows == 0 {
		t.Fatalf("turn after the policy's splice cached %d of %d (stub at %d), %d rotated rows", st.Cached, st.Prompt, sp.Start, st.RoundedRows)
	}
}

// waitForEither waits until one of two spliced sequences is cached on
// the device as far as a splice can cache it: the full pages its old
// sequence had cached (oldLen rounded down), moved by delta. It returns
// the tokens cached.
func waitForEither(t *testing.T, d *daemon.Daemon, delta int, a []uint32, oldA int, b []uint32, oldB int) int {
	t.Helper()
	cached := func(toks []uint32, old int) int {
		n := (old/hostPage*hostPage + delta) / hostPage * hostPage
		h := blockid.Compute(toks[:n], hostPage, blockid.Salt{})
		d.Index().Do(func(ix *cache.Index) {
			for _, s := range h.Sequence {
				if p, ok := ix.Lookup("", s); !ok || !p.Tiers.Has(tier.Device) {
					n = 0
					return
				}
			}
		})
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if n := max(cached(a, oldA), cached(b, oldB)); n > 0 {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatal("the policy's edited sequence never became cached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitAudit waits for an applied directive of verb from source in the
// host's audit log, and fails on a refused one.
func waitAudit(t *testing.T, path, source string, verb directive.Verb) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // plugin processes start slowly on a loaded machine
	for {
		recs, _ := executor.ReadAuditFile(path)
		for _, r := range recs {
			if r.Source != source || r.Verb != string(verb) {
				continue
			}
			if r.Status != directive.StatusOK {
				t.Fatalf("the host refused %s's %s: %s %s", source, verb, r.Code, r.Detail)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s from %s in the audit log: %+v", verb, source, recs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
