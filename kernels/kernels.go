// Package kernels edits KV cache memory in bulk for kvpilot: it re-rotates
// the RoPE slice of cached keys by a per-slot Δ (the splice directive's
// position shift), copies whole rows between token slots while
// rotating (fused gather→rotate→scatter), and copies rows between arenas for
// tier transfers.
//
// # Memory model
//
// An Arena is one contiguous region of KV memory (a memfd mapping, a Go
// slice, pinned host memory, or a CUDA allocation) described by a Layout. A
// Layout holds a list of buffers; each buffer is an array of Slots rows of
// RowBytes bytes starting at its byte Offset in the arena:
//
//	arena[buf.Offset + slot*buf.RowBytes : ... + buf.RowBytes]  // one token slot of one buffer
//
// A slot is one token: the pool maps page p of a pool with P tokens per page
// to slots [p*P, (p+1)*P) (see PageSlots). Every buffer has the same number of
// slots. K and V of every layer are separate buffers; MLA has one fused
// buffer per layer whose row is [kv_c (512) | k_pe (64)]. A buffer whose keys
// carry RoPE has a RopeSlice: Heads heads, head h's rotary slice starting at
// byte Offset + h*HeadStride within the row, with Rope.Dim elements paired as
// the Rope config says. Bytes outside the RoPE slices are never modified by a
// rotation; copies move whole rows. All elements share one DType; data is
// little-endian.
//
// # Engines
//
// Engine is implemented by the CPU engine here (NewCPU) and by the CUDA
// engine in kernels/cuda, which takes device arenas. Both compute the
// rotation in float32 with explicitly unfused multiplies and adds, so the two
// agree bit for bit: x' = x·cos − y·sin, y' = x·sin + y·cos, with cos(Δθ_i)
// and sin(Δθ_i) computed once per distinct Δ in float64 and rounded to
// float32 (rope.Rotary.DeltaTable); bf16 and fp16 are widened exactly and
// stored with round to nearest even.
//
// The CPU engine has plain-Go kernels, which run everywhere and define the
// results, and on amd64 with AVX2 and F16C Go-assembly kernels chosen at run
// time, which reproduce them bit for bit (separate multiplies and adds, no
// FMA; the same rounding and NaN results). CPUKernels reports which run;
// KVPILOT_CPU_KERNELS=generic forces the plain-Go ones.
package kernels

import (
	"errors"

	"github.com/kvpilot/kvpilot/kernels/rope"
)

// Errors wrapped by every engine failure, so callers can tell bad requests
// from device trouble.
var (
	// ErrLayout: an invalid layout, or an arena that does not fit its layout.
	ErrLayout = errors.New("kernels: invalid layout")
	// ErrArgs: slot lists or deltas that are malformed (length mismatch, slot
	// out of range, duplicate destination, Δ out of range).
	ErrArgs = errors.New("kernels: invalid arguments")
	// ErrMemory: an arena in memory this engine cannot address (a device
	// arena given to the CPU engine, unpinned host memory given to CUDA).
	ErrMemory = errors.New("kernels: arena memory not addressable by this engine")
)

// ErrConfig is the RoPE config error, re-exported for callers of NewLayout.
var ErrConfig = rope.ErrConfig

// Engine runs the kernels on one kind of memory. Every method validates its
// arguments first and changes nothing when it returns an error; a call
// returns when its work is complete and visible to the caller.
type Engine interface {
	// Device is "cpu" or "cuda".
	Device() string
	// Rotate rotates, in place, the RoPE slice of every head of every
	// RoPE-carrying buffer in slot slots[i] by deltas[i] positions. Slots must
	// be distinct.
	Rotate(a Arena, slots, deltas []int) error
	// GatherRotateScatter copies the whole row of every buffer from slot
	// src[i] to slot dst[i] and rotates the copy's RoPE slice by deltas[i]. It
	// behaves as if every source were read before any destination is written.
	// Destinations must be distinct; sources may repeat.
	GatherRotateScatter(a Arena, src, dst, deltas []int) error
	// Copy copies the whole row of every buffer from slot srcSlots[i] of src
	// to slot dstSlots[i] of dst. The arenas' layouts must have the same
	// buffers and row sizes (slot counts may differ); they may be the same
	// arena, with GatherRotateScatter's read-before-write semantics.
	Copy(dst Arena, dstSlots []int, src Arena, srcSlots []int) error
}

// MaxDelta bounds |Δ| so every implementation can carry it in an int32.
const MaxDelta = 1<<31 - 1

// PageSlots appends the token slots of page (pageTokens tokens per page) to
// dst: the mapping pools use between pages and slots.
func PageSlots(dst []int, page, pageTokens int) []int {
	for t := 0; t < pageTokens; t++ {
		dst = append(dst, page*pageTokens+t)
	}
	return dst
}
