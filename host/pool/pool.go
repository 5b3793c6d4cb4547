// Package pool defines the KV page pools of the four tiers
// and the types they share.
//
// Two kinds of pool exist because the tiers are addressed differently:
//
//   - Memory pools (device, host) are arenas the engine maps. A page lives
//     in a slot, and the cache index records which slot holds which page.
//     Implementations: memfd (shared memory, the default for both tiers
//     without a GPU) and cuda (device memory exported by IPC handle).
//   - Stores (disk, remote) are keyed by the page's identity, Key, because
//     their contents must be found again after a restart or by another
//     host, where slot numbers mean nothing. Implementations: disk (page
//     files with checksums under the data dir) and remote (a JetStream
//     object store).
//
// Every pool holds pages of exactly one layout.Layout and moves them as
// opaque PageBytes-long byte strings in the layout's canonical order.
package pool

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Sentinel errors, wrapped with context by every implementation.
var (
	// ErrFull: the pool has fewer free pages than asked for; nothing was allocated.
	ErrFull = errors.New("pool full")
	// ErrBadSlot: a slot number outside the pool, or one not allocated.
	ErrBadSlot = errors.New("bad slot")
	// ErrDoubleFree: a slot freed twice.
	ErrDoubleFree = errors.New("slot freed twice")
	// ErrNotFound: no page under that key.
	ErrNotFound = errors.New("page not found")
	// ErrCorrupt: a stored page failed its checksum or header check. It has
	// been dropped and will not be served again.
	ErrCorrupt = errors.New("corrupt page")
	// ErrPageSize: a buffer is not exactly one page long.
	ErrPageSize = errors.New("buffer is not one page")
	// ErrClosed: the pool was closed.
	ErrClosed = errors.New("pool closed")
	// ErrKey: a key that cannot be stored (namespace too long).
	ErrKey = errors.New("bad page key")
)

// Slot numbers a page-sized region of a memory pool, 0..Capacity-1.
type Slot uint32

// Key is a page's identity outside the process: the cache namespace
// (tenant) and the page's sequence hash. The layout
// fingerprint is the pool's, so it is not repeated here.
type Key struct {
	Namespace string
	Seq       uint64
}

// Entry is a stored page's key plus what the cache index needs to put it
// back in its tree (cache.Index.Insert): its local hash and its parent's
// sequence hash. Stores keep it beside the page, so a restarted host, or
// another host sharing the remote bucket, can rebuild the path.
type Entry struct {
	Key
	Local     uint64
	Parent    uint64
	HasParent bool
}

func (k Key) String() string {
	if k.Namespace == "" {
		return fmt.Sprintf("%016x", k.Seq)
	}
	return fmt.Sprintf("%s/%016x", k.Namespace, k.Seq)
}

// MaxNamespace is the longest namespace a Key may carry; disk headers
// reserve this much room.
const MaxNamespace = 192

// Stats is the accounting the index's budgets and watermarks read. Counts
// are in pages. Capacity 0 means unbounded (a remote bucket with no limit).
type Stats struct {
	Capacity  int64 `json:"capacity"`
	Used      int64 `json:"used"`
	Free      int64 `json:"free"`
	PageBytes int   `json:"page_bytes"`
	// Corrupt counts pages dropped since open because they failed a check.
	Corrupt int64 `json:"corrupt,omitempty"`
}

// Pool is what every tier's pool has.
type Pool interface {
	Tier() tier.Tier
	Layout() *layout.Layout
	Stats() Stats
	Close() error
}

// Memory is a slot-addressed pool the engine can map: device or host.
type Memory interface {
	Pool
	// Alloc appends n slots to dst, all or nothing (ErrFull).
	Alloc(dst []Slot, n int) ([]Slot, error)
	// Free returns slots to the pool. It validates them all first: on
	// error, none was freed.
	Free(slots ...Slot) error
	// ReadPage copies the page in slot s, in canonical order, into dst
	// (exactly PageBytes long).
	ReadPage(s Slot, dst []byte) error
	// WritePage copies src (exactly PageBytes long, canonical order) into slot s.
	WritePage(s Slot, src []byte) error
	// Handle describes the backing memory so another process can map it.
	Handle() Handle
}

// PageViewer is implemented by memory pools whose pages are contiguous in
// this process's address space: PageView returns the live bytes of a slot,
// so a copy to another tier needs no staging buffer.
type PageViewer interface {
	PageView(s Slot) ([]byte, error)
}

// Store is a key-addressed pool: disk or remote.
type Store interface {
	Pool
	// Put stores page (exactly PageBytes) under e.Key, replacing any page there.
	Put(ctx context.Context, e Entry, page []byte) error
	// Get reads the page under key into dst (exactly PageBytes). It returns
	// ErrNotFound, or ErrCorrupt after dropping a page that failed its check.
	Get(ctx context.Context, key Key, dst []byte) error
	// Delete removes the page; deleting an absent key is not an error.
	Delete(ctx context.Context, key Key) error
	// Stat returns the entry stored under key, or ErrNotFound.
	Stat(ctx context.Context, key Key) (Entry, error)
	// List returns every stored page's entry, so the index can be rebuilt
	// at start.
	List(ctx context.Context) ([]Entry, error)
	// Sync makes every completed Put durable, per the store's policy.
	Sync() error
}

// HandleKind says how to open a Handle.
type HandleKind uint8

const (
	// HandleMemfd: FD is a memfd of Size bytes; map it shared.
	HandleMemfd HandleKind = iota + 1
	// HandleCUDAIPC: IPC is a CUcudaIpcMemHandle for cuIpcOpenMemHandle.
	HandleCUDAIPC
)

func (k HandleKind) String() string {
	switch k {
	case HandleMemfd:
		return "memfd"
	case HandleCUDAIPC:
		return "cuda_ipc"
	}
	return fmt.Sprintf("handle_kind(%d)", uint8(k))
}

// Handle describes a memory pool's backing memory for the engine (sent over
// the engine socket; for memfd the FD travels with SCM_RIGHTS).
type Handle struct {
	Kind        HandleKind
	Tier        tier.Tier
	FD          int    // HandleMemfd: valid in this process only
	IPC         []byte // HandleCUDAIPC: the 64-byte handle
	Size        int64  // bytes of the whole arena
	Slots       int    // pages in the arena
	Arrangement layout.Arrangement
	Fingerprint layout.Fingerprint
	// Pinned: the host arena is registered with CUDA for DMA.
	Pinned bool
}

// CheckPage returns ErrPageSize, with context, unless len(b) == want.
func CheckPage(b []byte, want int) error {
	if len(b) != want {
		return fmt.Errorf("%w: %d bytes, want %d", ErrPageSize, len(b), want)
	}
	return nil
}
