package splice

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/memfd"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

// rig is a real device pool (memfd), an index and a splicer, with an
// "engine" that writes K as RoPE(pos)·h(token) and V as f(token), the
// reference engine's rule, so every check is against what a
// prefill at that position would have written.
type rig struct {
	t        testing.TB
	lay      *layout.Layout
	arena    *memfd.Arena
	ix       *cache.Index
	clock    *cache.ManualClock
	sess     *MemorySessions
	sp       *Splicer
	rot      *rope.Rotary
	fills    []FillOrder
	failFill bool
}

type rigOpts struct {
	arr    layout.Arrangement
	mla    bool
	pages  int
	sink   int
	noFill bool
	// recompute: the engine serves sparse orders; rule is the tenant's
	// configured recompute.
	recompute bool
	rule      Recompute
}

const (
	rigPage   = 4
	rigTenant = "t"
)

func newRig(t testing.TB, o rigOpts) *rig {
	t.Helper()
	if o.pages == 0 {
		o.pages = 64
	}
	var lay layout.Layout
	var rc rope.Config
	if o.mla {
		lay = layout.MLA("mla", rigPage, layout.FP32, 2, 6, 4, layout.Interleaved)
		rc = rope.Config{Base: 10000, Dim: 4, Pairing: rope.Interleaved}
	} else {
		// Partial rotary: 6 of 8 elements per head turn.
		lay = layout.MHA("gqa", rigPage, layout.FP32, 2, 2, 8, 6, layout.HalfSplit)
		rc = rope.Config{Base: 10000, Dim: 6, Pairing: rope.HalfSplit}
	}
	arena, err := memfd.New(memfd.Options{Tier: tier.Device, Layout: &lay, Pages: o.pages, Arrangement: o.arr})
	if err != nil {
		t.Fatalf("memfd: %v", err)
	}
	t.Cleanup(func() { arena.Close() })
	clock := cache.NewManualClock(time.Second)
	ix, err := cache.New(cache.Config{PageSize: rigPage, Clock: clock,
		Tiers: [tier.Count]cache.TierConfig{tier.Device: {Capacity: o.pages, High: 1, Low: 1, PinFraction: 0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := NewDevice(arena, Memory{Host: arena.Bytes()}, rc, kernels.NewCPU())
	if err != nil {
		t.Fatalf("NewDevice: %v", err)
	}
	rot, err := rope.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, lay: arena.Layout(), arena: arena, ix: ix, clock: clock, rot: rot,
		sess: NewMemorySessions(rigPage, nil)}
	cfg := Config{Index: guarded.New(ix), Device: dev, Sessions: r.sess, SinkTokens: o.sink, Free: r.free,
		Recompute: o.recompute, Rule: func(string) Recompute { return o.rule }}
	if !o.noFill {
		cfg.Fill = r.fill
	}
	if r.sp, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) free(fs []cache.Freed) {
	for _, f := range fs {
		if f.Tier == tier.Device {
			if err := r.arena.Free(pool.Slot(f.Loc)); err != nil {
				r.t.Errorf("free %v: %v", f, err)
			}
		}
	}
}

// fill is the engine's side of a fill order: it writes the replacement's
// rows at their positions, as a prefill would.
func (r *rig) fill(_ context.Context, o FillOrder) (FillResult, error) {
	r.fills = append(r.fills, o)
	if r.failFill {
		return FillResult{}, fmt.Errorf("engine refused")
	}
	if len(o.Positions) == 0 && o.Candidates == nil {
		for k, tok := range o.Tokens {
			row := o.FirstOffset + k
			r.writeToken(uint64(o.PageSlots[row/rigPage]), row%rigPage, tok, o.Position+k)
		}
		return FillResult{}, nil
	}
	// A sparse order: each token at its position, in the order's pages.
	pages := append(slices.Clone(o.PrefixPageSlots), o.PageSlots...)
	put := func(tok uint32, pos int) { r.writeToken(uint64(pages[pos/rigPage]), pos%rigPage, tok, pos) }
	for k, tok := range o.Tokens {
		put(tok, int(o.Positions[k]))
	}
	var res FillResult
	if c := o.Candidates; c != nil {
		// The rig's ranking is the candidates' order; the guard takes all.
		n := int(math.Round(c.Share * float64(c.Region)))
		if c.MaxKL > 0 || n > len(c.Positions) {
			n = len(c.Positions)
		}
		for k := range n {
			put(c.Tokens[k], int(c.Positions[k]))
		}
		res.Recomputed = n
	}
	return res, nil
}

// hvec is h(token): the un-rotated rotary slice of a key.
func hvec(tok uint32, layer, head, dim int) []float64 {
	x := make([]float64, dim)
	for i := range x {
		x[i] = math.Sin(float64(tok)*0.37+float64(layer)*1.3+float64(head)*0.71+float64(i)*0.19) + 0.1
	}
	return x
}

// fval is f(token) for the position-free elements.
func fval(tok uint32, layer, buf, elem int) float32 {
	return float32(tok)*0.001 + float32(layer*131+buf*17+elem)*0.25
}

func (r *rig) rowOffset(slot uint64, t, layer, buf int) int {
	return int(r.lay.ArenaSegmentOffset(r.arena.Handle().Arrangement, r.arena.Handle().Slots, int(slot), layer, buf)) + t*r.lay.RowBytes(buf)
}

// writeToken writes token tok at position pos into row t of page slot.
func (r *rig) writeToken(slot uint64, t int, tok uint32, pos int) {
	mem := r.arena.Bytes()
	for layer := 0; layer < r.lay.Layers; layer++ {
		for b, buf := range r.lay.Buffers {
			off := r.rowOffset(slot, t, layer, b)
			for h := 0; h < buf.Heads; h++ {
				for e := 0; e < buf.HeadDim; e++ {
					v := fval(tok, layer, b, h*buf.HeadDim+e)
					binary.LittleEndian.PutUint32(mem[off+(h*buf.HeadDim+e)*4:], math.Float32bits(v))
				}
				if rs := r.lay.Rope; rs != nil && rs.Buffer == b {
					x := hvec(tok, layer, h, rs.Dim)
					if err := r.rot.Apply(x, pos); err != nil {
						r.t.Fatal(err)
					}
					for i, v := range x {
						binary.LittleEndian.PutUint32(mem[off+(h*buf.HeadDim+rs.Offset+i)*4:], math.Float32bits(float32(v)))
					}
				}
			}
		}
	}
}

// prefill caches the full pages of tokens for session id, as an engine
// request would (allocate, write, commit), and records the session.
func (r *rig) prefill(id string, tokens []uint32) {
	r.t.Helper()
	n := r.cachePages(tokens)
	r.sess.Put(Session{ID: id, Tenant: rigTenant, Tokens: tokens, Cached: n * rigPage})
}

// cachePages caches the full pages of tokens as a request of no session
// would, and returns how many there are.
func (r *rig) cachePages(tokens []uint32) int {
	r.t.Helper()
	salt := blockid.Salt{Namespace: rigTenant}
	var m cache.MatchResult
	r.ix.Match(rigTenant, salt, tokens, &m)
	n := len(m.Hashes.Sequence)
	locs := make([]uint64, n)
	for i, p := range m.Pages {
		locs[i] = p.Loc[tier.Device]
	}
	fresh, err := r.arena.Alloc(nil, n-len(m.Pages))
	if err != nil {
		r.t.Fatalf("alloc: %v", err)
	}
	for i, s := range fresh {
		q := len(m.Pages) + i
		locs[q] = uint64(s)
		for t := 0; t < rigPage; t++ {
			r.writeToken(uint64(s), t, tokens[q*rigPage+t], q*rigPage+t)
		}
	}
	var cr cache.CommitResult
	if err := r.ix.Commit(rigTenant, m.Hashes, locs, &cr); err != nil {
		r.t.Fatalf("commit: %v", err)
	}
	return n
}

// path returns the device slots of the cached full pages of tokens.
func (r *rig) path(tokens []uint32) []uint64 {
	var m cache.MatchResult
	r.ix.Match(rigTenant, blockid.Salt{Namespace: rigTenant}, tokens, &m)
	var out []uint64
	for _, p := range m.Pages {
		if !p.Tiers.Has(tier.Device) {
			break
		}
		out = append(out, p.Loc[tier.Device])
	}
	return out
}

// checkSession verifies every cached row of session id against a prefill
// of its sequence: the rotary slice within fp32 round-off, everything else
// bit for bit. It returns the number of cached pages.
func (r *rig) checkSession(id string) int {
	r.t.Helper()
	s, ok := r.sess.Session(id)
	if !ok {
		r.t.Fatalf("session %s unknown", id)
	}
	slots := r.path(s.Tokens)
	if got := len(slots) * rigPage; got < s.Cached {
		r.t.Fatalf("session %s: %d tokens cached in the index, the session says %d", id, got, s.Cached)
	}
	mem := r.arena.Bytes()
	for q, slot := range slots {
		for t := 0; t < rigPage; t++ {
			pos := q*rigPage + t
			tok := s.Tokens[pos]
			for layer := 0; layer < r.lay.Layers; layer++ {
				for b, buf := range r.lay.Buffers {
					off := r.rowOffset(slot, t, layer, b)
					rs := r.lay.Rope
					for h := 0; h < buf.Heads; h++ {
						var want []float64
						if rs != nil && rs.Buffer == b {
							want = hvec(tok, layer, h, rs.Dim)
							r.rot.Apply(want, pos)
						}
						for e := 0; e < buf.HeadDim; e++ {
							got := math.Float32frombits(binary.LittleEndian.Uint32(mem[off+(h*buf.HeadDim+e)*4:]))
							if want != nil && e >= rs.Offset && e < rs.Offset+rs.Dim {
								if w := want[e-rs.Offset]; math.Abs(float64(got)-w) > 2e-5*(1+math.Abs(w)) {
									r.t.Fatalf("session %s pos %d (token %d) layer %d head %d: rotary elem %d = %v, want %v",
										id, pos, tok, layer, h, e-rs.Offset, got, w)
								}
								continue
							}
							if w := fval(tok, layer, b, h*buf.HeadDim+e); math.Float32bits(got) != math.Float32bits(w) {
								r.t.Fatalf("session %s pos %d (token %d) layer %d buf %d: elem %d = %v, want %v bit for bit",
									id, pos, tok, layer, b, h*buf.HeadDim+e, got, w)
							}
						}
					}
				}
			}
		}
	}
	return len(slots)
}

// checkNoLeak verifies that every allocated device slot is a page the
// index holds, and the index is consistent.
func (r *rig) checkNoLeak() {
	r.t.Helper()
	if err := r.ix.Check(); err != nil {
		r.t.Fatalf("index: %v", err)
	}
	used := r.arena.Stats().Used
	if idx := int64(r.ix.Stats().Tiers[tier.Device].Pages); used != idx {
		r.t.Fatalf("device pool has %d slots allocated, the index holds %d pages", used, idx)
	}
}

func seqTokens(base, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(base + i)
	}
	return out
}

func cat(parts ...[]uint32) []uint32 {
	var out []uint32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// apply is the edits applied to tokens: the sequence a splice must yield.
func apply(tokens []uint32, edits []Edit) []uint32 {
	es := slices.Clone(edits)
	slices.SortFunc(es, func(a, b Edit) int { return a.Start - b.Start })
	var out []uint32
	pos := 0
	for _, e := range es {
		out = append(out, tokens[pos:e.Start]...)
		out = append(out, e.Replacement...)
		pos = e.End
	}
	return append(out, tokens[pos:]...)
}
