package refengine

import (
	"encoding/binary"
	"math"

	"github.com/kvpilot/kvpilot/kernels/rope"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// writer computes the deterministic K/V the reference engine writes:
// every element outside the RoPE slice is a function of (token, layer,
// buffer, head, element); the RoPE slice of a key head is RoPE(pos)·h(token,
// layer, head). So the K/V of a token at a position is known exactly without
// keeping it, and a cached key can be checked against what a prefill at its
// current position would have written.
type writer struct {
	l    *enginewire.Layout
	rot  *rope.Rotary
	seed uint64
	// per-call scratch
	vec []float64
}

func newWriter(l *enginewire.Layout, rot *rope.Rotary, seed uint64) *writer {
	return &writer{l: l, rot: rot, seed: seed, vec: make([]float64, l.Rope.Dim)}
}

func mix(x uint64) uint64 { // splitmix64 finalizer
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// value is a deterministic number in [-1, 1) with 24 significant bits, so
// fp32 holds it exactly.
func (w *writer) value(tok uint32, layer, buf, head, elem int) float64 {
	k := w.seed ^ uint64(tok)*0x9e3779b97f4a7c15 ^ uint64(layer)<<48 ^ uint64(buf)<<40 ^ uint64(head)<<24 ^ uint64(elem)
	return float64(mix(k)>>40)/float64(1<<23) - 1
}

// ropeSlice fills w.vec with RoPE(pos)·h(token) for one key head, in float64.
func (w *writer) ropeSlice(tok uint32, pos, layer, head int) []float64 {
	rs := w.l.Rope
	for i := range w.vec {
		w.vec[i] = w.value(tok, layer, rs.Buffer, head, rs.Offset+i)
	}
	_ = w.rot.Apply(w.vec, pos) // len(vec) is the rotary dim by construction
	return w.vec
}

// inRope reports whether element e of a head of buffer buf is rotary.
func (w *writer) inRope(buf, e int) bool {
	rs := w.l.Rope
	return buf == rs.Buffer && e >= rs.Offset && e < rs.Offset+rs.Dim
}

// writeRow encodes the row of (layer, buf) for token tok at position pos.
func (w *writer) writeRow(dst []byte, tok uint32, pos, layer, buf int) {
	b := w.l.Buffers[buf]
	es := w.l.ElemBytes()
	for h := 0; h < b.Heads; h++ {
		var rv []float64
		if buf == w.l.Rope.Buffer {
			rv = w.ropeSlice(tok, pos, layer, h)
		}
		for e := 0; e < b.HeadDim; e++ {
			var v float64
			if w.inRope(buf, e) {
				v = rv[e-w.l.Rope.Offset]
			} else {
				v = w.value(tok, layer, buf, h, e)
			}
			encode(dst[(h*b.HeadDim+e)*es:], w.l.DType, v)
		}
	}
}

func encode(dst []byte, dtype string, v float64) {
	f := float32(v)
	if dtype == "bf16" {
		binary.LittleEndian.PutUint16(dst, f32ToBF16(f))
		return
	}
	binary.LittleEndian.PutUint32(dst, math.Float32bits(f))
}

func decode(src []byte, dtype string) float64 {
	if dtype == "bf16" {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(src)) << 16))
	}
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(src)))
}

// f32ToBF16 rounds to nearest even (the values here are finite).
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// ulp is one unit in the last place of |v| in dtype.
func ulp(v float64, dtype string) float64 {
	mant := 23
	if dtype == "bf16" {
		mant = 7
	}
	if v == 0 {
		return math.Ldexp(1, -126)
	}
	_, exp := math.Frexp(math.Abs(v))
	return math.Ldexp(1, exp-1-mant)
}
