package policytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// ReplayOptions shape a Replay. The zero value is usable.
type ReplayOptions struct {
	// Start is the first request's time (default 2026-01-01 00:00 UTC).
	Start time.Time
	// Gap returns the idle time after request turn finishes and before
	// the next one starts (default 20 s).
	Gap func(turn int) time.Duration
	// TickEvery is the tick interval delivered during gaps (default 10 s).
	TickEvery time.Duration
	// PageSize in tokens (default 16).
	PageSize int
	// Tenant stamped on the session's observations.
	Tenant string
	// RenderThinking renders the trace's thinking as <think>…</think>.
	RenderThinking bool
	// MaxRequests stops the replay early (0: the whole trace).
	MaxRequests int
}

// Step is one observation that produced directives.
type Step struct {
	Turn       int                   `json:"turn"`
	AtSeconds  float64               `json:"at_s"`
	Kind       string                `json:"kind"`
	Directives []directive.Directive `json:"directives"`
}

// Stats sum up a replay.
type Stats struct {
	Requests     int            `json:"requests"`
	Observations int            `json:"observations"`
	Directives   int            `json:"directives"`
	ByVerb       map[string]int `json:"by_verb"`
	// RemovedTokens counts tokens splices took out; InsertedTokens what
	// their replacements put back.
	RemovedTokens  int64 `json:"removed_tokens"`
	InsertedTokens int64 `json:"inserted_tokens"`
	// FinalTokens is the session's cached length at the end; UneditedTokens
	// what it would be without the policy.
	FinalTokens    int64 `json:"final_tokens"`
	UneditedTokens int64 `json:"unedited_tokens"`
}

// Result is what a replay produced.
type Result struct {
	Session string   `json:"session"`
	Steps   []Step   `json:"steps"`
	Stats   Stats    `json:"stats"`
	Final   *Session `json:"-"`
}

// JSON renders the result as golden-file text: one line per step, then the
// stats.
func (r *Result) JSON() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# session %s\n", r.Session)
	for _, s := range r.Steps {
		line, err := json.Marshal(s)
		if err != nil {
			panic(err) // directives always marshal; a failure is a bug in sdk/directive
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	st, _ := json.Marshal(r.Stats)
	b.WriteString("# stats ")
	b.Write(st)
	b.WriteByte('\n')
	return b.Bytes()
}

// Observer is what Replay drives: a Harness, or anything else that delivers
// an observation to a policy and returns its checked directives (the host
// runtime's tests use a real plugin process).
type Observer interface {
	TryObserve(policy.Observation) ([]directive.Directive, error)
}

// Replay drives h through trace tr as a host would: every run of assistant
// messages is one request whose prompt is everything before it. For each
// request it delivers RequestStarted (spans over the session's cached
// sequence), applies the returned splices and evictions to its model of the
// session, appends the response, delivers RequestFinished, then Ticks
// through the gap before the next request. Directives that cut across the
// chat template or fall outside the session fail the replay.
func Replay(h Observer, tr Trace, o ReplayOptions) (*Result, error) {
	if o.Start.IsZero() {
		o.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.Gap == nil {
		o.Gap = func(int) time.Duration { return 20 * time.Second }
	}
	if o.TickEvery <= 0 {
		o.TickEvery = 10 * time.Second
	}
	if o.PageSize <= 0 {
		o.PageSize = 16
	}
	sess := NewSession(tr.SessionID, o.RenderThinking)
	plain := NewSession(tr.SessionID, o.RenderThinking)
	res := &Result{Session: tr.SessionID, Stats: Stats{ByVerb: map[string]int{}}, Final: sess}
	now := o.Start
	deliver := func(turn int, obs policy.Observation) error {
		obs.Time, obs.Tenant = now, o.Tenant
		res.Stats.Observations++
		ds, err := h.TryObserve(obs)
		if err != nil {
			return fmt.Errorf("turn %d %v: %w", turn, obs.Kind, err)
		}
		if len(ds) == 0 {
			return nil
		}
		res.Steps = append(res.Steps, Step{Turn: turn, AtSeconds: now.Sub(o.Start).Seconds(), Kind: obs.Kind.String(), Directives: ds})
		res.Stats.Directives += len(ds)
		for _, d := range ds {
			res.Stats.ByVerb[string(d.Verb())]++
		}
		if err := applyEdits(sess, ds, &res.Stats); err != nil {
			return fmt.Errorf("turn %d %v: %w", turn, obs.Kind, err)
		}
		return nil
	}

	msgs := tr.Messages
	turn := 0
	for i := 0; i < len(msgs); {
		if msgs[i].Role != "assistant" {
			sess.Append(msgs[i])
			plain.Append(msgs[i])
			i++
			continue
		}
		if o.MaxRequests > 0 && turn >= o.MaxRequests {
			break
		}
		j := i
		for j < len(msgs) && msgs[j].Role == "assistant" {
			j++
		}
		toks := sess.Tokens()
		if err := deliver(turn, policy.Observation{Kind: policy.KindRequestStarted, Session: tr.SessionID, Started: &policy.RequestStarted{
			RequestID: fmt.Sprintf("%s/%d", tr.SessionID, turn), Turn: int64(turn), PromptTokens: int64(len(toks)),
			PageSize: uint32(o.PageSize), BlockHashes: PageHashes(toks, o.PageSize), Messages: sess.Messages(),
		}}); err != nil {
			return res, err
		}
		input := sess.Len()
		first := len(sess.msgs)
		var reasoning int64
		for _, m := range msgs[i:j] {
			sess.Append(m)
			plain.Append(m)
			if o.RenderThinking && m.ThinkingText != "" {
				reasoning += int64(len(Tokenize("<think>" + m.ThinkingText + "</think>")))
			}
		}
		now = now.Add(time.Second)
		toks = sess.Tokens()
		hashes := PageHashes(toks, o.PageSize)
		var rblocks []uint64
		for _, p := range sess.thinkingPages(o.PageSize, first) {
			rblocks = append(rblocks, hashes[p])
		}
		if err := deliver(turn, policy.Observation{Kind: policy.KindRequestFinished, Session: tr.SessionID, Finished: &policy.RequestFinished{
			RequestID:   fmt.Sprintf("%s/%d", tr.SessionID, turn),
			Usage:       policy.Usage{InputTokens: input, OutputTokens: sess.Len() - input, ReasoningTokens: reasoning},
			BlockHashes: hashes, ReasoningBlocks: rblocks,
		}}); err != nil {
			return res, err
		}
		res.Stats.Requests++
		next := now.Add(o.Gap(turn))
		for t := now.Add(o.TickEvery); t.Before(next); t = t.Add(o.TickEvery) {
			now = t
			if err := deliver(turn, policy.Observation{Kind: policy.KindTick, Tick: &policy.Tick{Interval: o.TickEvery}}); err != nil {
				return res, err
			}
		}
		now = next
		turn++
		i = j
	}
	res.Stats.FinalTokens = sess.Len()
	res.Stats.UneditedTokens = plain.Len()
	return res, nil
}

// applyEdits applies a turn's splices and evictions to the model. Their
// positions all name the sequence before the turn, so applying them right
// to left needs no running Δ.
func applyEdits(s *Session, ds []directive.Directive, st *Stats) error {
	type edit struct {
		start, end int64
		repl       []uint32
	}
	var es []edit
	for _, d := range ds {
		_, d = policy.Unwrap(d)
		switch d := d.(type) {
		case directive.Splice:
			if d.Session != s.ID {
				return fmt.Errorf("splice names session %q, not %q", d.Session, s.ID)
			}
			repl := d.Replacement.Tokens
			if d.Replacement.Text != "" {
				repl = Tokenize(d.Replacement.Text)
			}
			es = append(es, edit{d.Start, d.End, repl})
		case directive.Evict:
			if d.Session != s.ID {
				return fmt.Errorf("evict names session %q, not %q", d.Session, s.ID)
			}
			es = append(es, edit{d.Start, d.End, nil})
		}
	}
	sort.Slice(es, func(a, b int) bool { return es[a].start > es[b].start })
	for _, e := range es {
		if err := s.Splice(e.start, e.end, e.repl); err != nil {
			return err
		}
		st.RemovedTokens += e.end - e.start
		st.InsertedTokens += int64(len(e.repl))
	}
	return nil
}
