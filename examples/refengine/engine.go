// Package refengine is kvpilot's reference engine: a real client of the
// engine protocol (sdk/engineclient) that stands in for an inference engine
// in end-to-end tests and benchmarks. It imports only sdk/ and
// kernels/rope.
//
// It writes deterministic K/V into the device arena it maps from the host:
// K's non-rotary part and V are functions of the token; the key's RoPE slice
// is RoPE(pos)·h(token). Prefill time is not spent but modelled (CostModel):
// a turn's time to first token is its prefilled tokens times a per-token cost
// plus the bytes the host loaded back at a bandwidth.
//
// On every request it checks the splice contract on every
// cached key it is handed: the key must equal what the engine would have
// written for that token at that position, exactly when nothing rotated it,
// and within fp32 round-off (or one storage ulp) after a rotation; V and the
// non-rotary part of K must be bit-identical always. A violation fails the
// turn with ErrContract.
package refengine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/kernels/rope"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// ErrContract: a cached key differs from what a prefill at its position
// would have written.
var ErrContract = errors.New("splice contract violated")

// Config configures an Engine.
type Config struct {
	Socket   string    `json:"socket"`
	EngineID string    `json:"engine_id"`
	Model    Model     `json:"model"`
	Cost     CostModel `json:"cost"`
	// Seed varies the K/V values (the same seed writes the same bytes).
	Seed uint64 `json:"seed"`
	// SkipContract turns the per-request check off (large benchmarks).
	SkipContract bool `json:"skip_contract"`
	// ResetCache registers with a cache reset.
	ResetCache bool `json:"reset_cache"`
}

// Engine is a running reference engine. It is safe for concurrent use:
// turns of different sessions may run at once, as in a batching engine.
type Engine struct {
	cfg    Config
	layout enginewire.Layout
	rot    *rope.Rotary
	c      *engineclient.Client

	mu     sync.Mutex
	totals Totals
}

// TurnRequest is one request of a session.
type TurnRequest struct {
	Session, Tenant string
	// Tokens is the prompt; Output the tokens the engine "generates" (they
	// are written and committed after the prompt, as decode would).
	Tokens   []uint32
	Output   []uint32
	Messages []chat.Message
	// CacheControl or CacheControlJSON (Anthropic or nvext form) pins the
	// request's prefix at Finish.
	CacheControl     *enginewire.CacheControl
	CacheControlJSON string
}

// TurnStats is what one turn cost.
type TurnStats struct {
	Prompt    int `json:"prompt_tokens"`
	Cached    int `json:"cached_tokens"`
	Prefilled int `json:"prefilled_tokens"`
	// LoadedPages and LoadedBytes came back from colder tiers.
	LoadedPages        int     `json:"loaded_pages"`
	LoadedBytes        int64   `json:"loaded_bytes"`
	LoadBackIncomplete bool    `json:"load_back_incomplete"`
	TTFTms             float64 `json:"ttft_ms"`
	// MatchMs is the wall time of the Match call (load-back included).
	MatchMs float64 `json:"match_ms"`
	// CheckedRows were compared with the contract; RoundedRows of them
	// matched within tolerance but not bit for bit (rotated keys).
	CheckedRows  int  `json:"checked_rows"`
	RoundedRows  int  `json:"rounded_rows"`
	Pinned       bool `json:"pinned"`
	PinnedBlocks int  `json:"pinned_blocks"`
	// Retried: the host restarted during the turn and it was run again.
	Retried bool `json:"retried"`
}

// Totals sums every turn.
type Totals struct {
	Turns, Prompt, Cached, Prefilled, LoadedPages int
	LoadedBytes                                   int64
	TTFTms                                        float64
	CheckedRows, RoundedRows                      int
}

// New registers with the host at cfg.Socket.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	l, err := cfg.Model.Layout()
	if err != nil {
		return nil, err
	}
	rot, err := cfg.Model.Rotary(l)
	if err != nil {
		return nil, fmt.Errorf("model %s rope: %w", cfg.Model.Name, err)
	}
	if cfg.EngineID == "" {
		cfg.EngineID = "refengine"
	}
	e := &Engine{cfg: cfg, layout: l, rot: rot}
	e.c, err = engineclient.Dial(ctx, engineclient.Options{Socket: cfg.Socket, EngineID: cfg.EngineID, Layout: l,
		Rope: engineclient.RopeConfig{Base: cfg.Model.RopeBase, Scaling: cfg.Model.RopeScaling}, ResetCache: cfg.ResetCache})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Client is the engine's protocol client.
func (e *Engine) Client() *engineclient.Client { return e.c }

// Layout is the registered layout.
func (e *Engine) Layout() enginewire.Layout { return e.layout }

// Totals returns the sums over every turn so far.
func (e *Engine) Totals() Totals {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.totals
}

// Close unregisters nothing (the host releases on re-registration or idle)
// and unmaps the arenas.
func (e *Engine) Close() error { return e.c.Close() }

// Turn runs one request of a session: the simple driver benchmarks use.
func (e *Engine) Turn(ctx context.Context, session, tenant string, tokens []uint32) (TurnStats, error) {
	return e.Run(ctx, TurnRequest{Session: session, Tenant: tenant, Tokens: tokens})
}

// Run runs one request: match, contract check, allocate, write, commit,
// finish. A turn cut by the host going away (a restart, a reset socket) is
// run again from its match, with a bounded backoff.
func (e *Engine) Run(ctx context.Context, r TurnRequest) (TurnStats, error) {
	var st TurnStats
	tries := 0
	err := e.c.RunRequest(ctx, engineclient.Retry{Attempts: 8}, func(ctx context.Context) error {
		var err error
		st, err = e.run(ctx, r)
		tries++
		return err
	})
	st.Retried = tries > 1
	if err != nil {
		return st, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t := &e.totals
	t.Turns++
	t.Prompt += st.Prompt
	t.Cached += st.Cached
	t.Prefilled += st.Prefilled
	t.LoadedPages += st.LoadedPages
	t.LoadedBytes += st.LoadedBytes
	t.TTFTms += st.TTFTms
	t.CheckedRows += st.CheckedRows
	t.RoundedRows += st.RoundedRows
	return st, nil
}

func (e *Engine) run(ctx context.Context, r TurnRequest) (st TurnStats, err error) {
	ps := e.layout.PageSize
	w := newWriter(&e.layout, e.rot, e.cfg.Seed) // per turn: turns may run concurrently
	seq := make([]uint32, 0, len(r.Tokens)+len(r.Output))
	seq = append(append(seq, r.Tokens...), r.Output...)
	// The whole turn computes in the device arena: a longer one can never
	// run, which is the client's to fix, not a failure to retry.
	if slots := e.c.Device().Slots; len(seq) > slots*ps {
		return st, errcode.New(errcode.PromptTooLong, "%d tokens with the answer; this engine holds %d (%d pages of %d)", len(seq), slots*ps, slots, ps)
	}
	matchStart := time.Now()
	m, err := e.c.Match(ctx, engineclient.MatchRequest{Session: r.Session, Tenant: r.Tenant, Tokens: r.Tokens, Messages: r.Messages})
	if err != nil {
		return st, err
	}
	st.MatchMs = float64(time.Since(matchStart).Microseconds()) / 1000
	finished := false
	defer func() {
		if !finished {
			_, _ = e.c.Release(ctx, m.RequestID)
		}
	}()
	dev := e.c.Device()
	st.Prompt, st.Cached = len(r.Tokens), m.CachedTokens
	st.LoadedPages, st.LoadedBytes, st.LoadBackIncomplete = m.LoadedPages, m.LoadedBytes, m.LoadBackIncomplete
	if !e.cfg.SkipContract {
		if err := e.check(w, dev, r.Session, r.Tokens, m.PageSlots, &st); err != nil {
			return st, err
		}
	}
	cachedPages := len(m.PageSlots)
	totalPages := (len(seq) + ps - 1) / ps
	slots := append([]uint32(nil), m.PageSlots...)
	if need := totalPages - cachedPages; need > 0 {
		got, err := e.c.Allocate(ctx, m.RequestID, need)
		if err != nil {
			return st, err
		}
		slots = append(slots, got...)
	}
	if err := e.write(w, dev, seq, slots, m.CachedTokens); err != nil {
		return st, err
	}
	st.Prefilled = len(r.Tokens) - m.CachedTokens
	if full := len(seq) / ps; full > 0 {
		if _, err := e.c.Commit(ctx, m.RequestID, seq, slots[:full]); err != nil {
			return st, err
		}
	}
	fin, err := e.c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID, CacheControl: r.CacheControl, CacheControlJSON: r.CacheControlJSON,
		Usage: engineclient.Usage{InputTokens: len(r.Tokens), CachedTokens: m.CachedTokens, OutputTokens: len(r.Output)}})
	if err != nil {
		return st, err
	}
	finished = true
	if fin.PinError != nil {
		return st, fmt.Errorf("cache_control pin refused: %w", fin.PinError)
	}
	st.Pinned, st.PinnedBlocks = fin.Pinned, fin.PinnedBlocks
	st.TTFTms = e.cfg.Cost.TTFT(st.Prefilled, st.LoadedBytes)
	return st, nil
}

// write prefills positions [from, len(seq)) into their pages.
func (e *Engine) write(w *writer, dev *engineclient.Arena, seq []uint32, slots []uint32, from int) error {
	ps := e.layout.PageSize
	for pos := from; pos < len(seq); pos++ {
		for layer := 0; layer < e.layout.Layers; layer++ {
			for buf := range e.layout.Buffers {
				row, err := dev.Row(int(slots[pos/ps]), layer, buf, pos%ps)
				if err != nil {
					return fmt.Errorf("write position %d: %w", pos, err)
				}
				w.writeRow(row, seq[pos], pos, layer, buf)
			}
		}
	}
	return nil
}

// check compares every row of the cached pages with what a prefill at the
// same positions writes.
func (e *Engine) check(w *writer, dev *engineclient.Arena, session string, toks []uint32, slots []uint32, st *TurnStats) error {
	ps := e.layout.PageSize
	es := e.layout.ElemBytes()
	rs := e.layout.Rope
	var row []byte
	for p, slot := range slots {
		for r := 0; r < ps; r++ {
			pos := p*ps + r
			for layer := 0; layer < e.layout.Layers; layer++ {
				for buf, b := range e.layout.Buffers {
					got, err := dev.Row(int(slot), layer, buf, r)
					if err != nil {
						return err
					}
					rb := e.layout.RowBytes(buf)
					if cap(row) < rb {
						row = make([]byte, rb)
					}
					want := row[:rb]
					w.writeRow(want, toks[pos], pos, layer, buf)
					st.CheckedRows++
					if string(got) == string(want) {
						continue
					}
					rounded := false
					for h := 0; h < b.Heads; h++ {
						var exact []float64
						if buf == rs.Buffer {
							exact = w.ropeSlice(toks[pos], pos, layer, h)
						}
						for el := 0; el < b.HeadDim; el++ {
							off := (h*b.HeadDim + el) * es
							if string(got[off:off+es]) == string(want[off:off+es]) {
								continue
							}
							g := decode(got[off:], e.layout.DType)
							if !w.inRope(buf, el) {
								return fmt.Errorf("%w: session %q position %d (slot %d row %d) layer %d buffer %s head %d element %d: %v, want %v bit for bit (outside the RoPE slice)",
									ErrContract, session, pos, slot, r, layer, b.Name, h, el, g, decode(want[off:], e.layout.DType))
							}
							i := el - rs.Offset
							tol := e.tolerance(exact, i)
							if d := math.Abs(g - exact[i]); !(d <= tol) {
								return fmt.Errorf("%w: session %q position %d (slot %d row %d) layer %d head %d rope element %d: %v, want %v ± %.3g",
									ErrContract, session, pos, slot, r, layer, h, i, g, exact[i], tol)
							}
							rounded = true
						}
					}
					if rounded {
						st.RoundedRows++
					}
				}
			}
		}
	}
	return nil
}

// tolerance for rotary element i: fp32 round-off of a few rotations of its
// pair (the rotation is computed in fp32) plus one storage ulp.
func (e *Engine) tolerance(exact []float64, i int) float64 {
	c := e.rot.Config()
	var j int
	for p := 0; p < c.Dim/2; p++ {
		a, b := c.Pair(p)
		if a == i {
			j = b
		} else if b == i {
			j = a
		}
	}
	norm := math.Hypot(exact[i], exact[j])
	return 16*ulp(norm, "fp32") + ulp(exact[i], e.layout.DType)
}
