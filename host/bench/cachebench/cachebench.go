// Package cachebench holds the cache index workloads shared by the index's
// Go benchmarks (host/cache) and `kvpilot bench index` (targets: ≤ 50 µs
// per 32K-token match+commit, ≥ 2M block ops/s per core). Timing uses the
// wall clock, which is why it lives here and not in the deterministic
// index; the index under test still runs on a ManualClock.
package cachebench

import (
	"fmt"
	"runtime"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
)

// benchIndex returns an index big enough never to evict during a run. Its
// events are handed to a no-op instead of buffered, as an engine's
// publisher would take them: nothing piles up between runs.
func benchIndex(pageSize, pages int) *cache.Index {
	capacity := max(pages*4, 1<<16)
	ix, err := cache.New(cache.Config{
		PageSize: pageSize,
		Tiers: [tier.Count]cache.TierConfig{
			tier.Device: {Capacity: capacity, High: 1, Low: 1, PinFraction: 1},
			tier.Host:   {Capacity: capacity, High: 1, Low: 1, PinFraction: 1},
		},
		DeviceWrite: cache.WriteNone,
		Clock:       cache.NewManualClock(time.Second),
		OnEvent:     func(cache.Event) {},
	})
	if err != nil {
		panic(err) // the config above is valid by construction
	}
	return ix
}

// MatchCommit is one request: Match a prompt, then Commit its pages.
type MatchCommit struct {
	ix   *cache.Index
	salt blockid.Salt
	toks []uint32
	locs []uint64
	m    cache.MatchResult
	res  cache.CommitResult
}

// NewMatchCommit builds the workload: a prompt of pages pages of pageSize
// tokens over an index that never evicts.
func NewMatchCommit(pages, pageSize int) *MatchCommit {
	w := &MatchCommit{ix: benchIndex(pageSize, pages), salt: blockid.Salt{Namespace: "bench"}}
	w.toks = make([]uint32, pages*pageSize)
	for i := range w.toks {
		w.toks[i] = uint32(i*7919 + 13)
	}
	w.locs = make([]uint64, pages)
	for i := range w.locs {
		w.locs[i] = uint64(i + 1)
	}
	return w
}

// Run matches and commits the prompt once. With fresh set, the first token
// changes so every page is new (a cold prompt).
func (w *MatchCommit) Run(fresh uint32) error {
	if fresh != 0 {
		w.toks[0] = fresh
	}
	w.ix.Match("bench", w.salt, w.toks, &w.m)
	return w.ix.Commit("bench", w.m.Hashes, w.locs, &w.res)
}

// Reset empties the index, so that cold prompts keep being inserted
// without filling it.
func (w *MatchCommit) Reset() { w.ix.Reset() }

// BlockOps drives single-block operations over a forest of short chains:
// lookup, pin, lock, match of one page, unlock, unpin per round.
type BlockOps struct {
	ix     *cache.Index
	seqs   []uint64
	hashes blockid.Hashes
	buf    []uint64
	m      cache.MatchResult
	i      int
}

// BlockOpsPerRound is the number of block operations one round performs.
const BlockOpsPerRound = 6

// NewBlockOps caches chains chains of depth pages of 16 tokens.
func NewBlockOps(chains, depth int) *BlockOps {
	const pageSize = 16
	w := &BlockOps{ix: benchIndex(pageSize, chains*depth), buf: make([]uint64, 1)}
	toks := make([]uint32, depth*pageSize)
	locs := make([]uint64, depth)
	var res cache.CommitResult
	var m cache.MatchResult
	for c := 0; c < chains; c++ {
		for i := range toks {
			toks[i] = uint32(c*1_000_003 + i)
		}
		w.ix.Match("bench", blockid.Salt{}, toks, &m)
		for i := range locs {
			locs[i] = uint64(c*depth + i + 1)
		}
		if err := w.ix.Commit("bench", m.Hashes, locs, &res); err != nil {
			panic(err)
		}
		w.seqs = append(w.seqs, m.Hashes.Sequence...)
		if c == 0 {
			w.hashes = blockid.Hashes{Local: m.Hashes.Local[:1:1], Sequence: m.Hashes.Sequence[:1:1]}
		}
	}
	return w
}

// Round performs BlockOpsPerRound operations on the next page.
func (w *BlockOps) Round() error {
	seq := w.seqs[w.i]
	w.i++
	if w.i == len(w.seqs) {
		w.i = 0
	}
	if _, ok := w.ix.Lookup("bench", seq); !ok {
		return fmt.Errorf("bench page %d missing", seq)
	}
	w.buf[0] = seq
	t := cache.Target{Tenant: "bench", Hashes: w.buf}
	if _, err := w.ix.Pin(t, time.Minute); err != nil {
		return err
	}
	if _, err := w.ix.Lock("bench", seq); err != nil {
		return err
	}
	w.ix.MatchHashes("bench", w.hashes, &w.m)
	if _, err := w.ix.Unlock("bench", seq); err != nil {
		return err
	}
	_, err := w.ix.Unpin(t)
	return err
}

// Result is what `kvpilot bench index` reports.
type Result struct {
	Pages    int `json:"pages"`
	PageSize int `json:"page_size"`
	Iters    int `json:"iters"`
	// MatchCommitMicros is one match+commit of a cached prompt (every page
	// hit), hashing included; MatchCommitColdMicros of a new prompt (every
	// page inserted).
	MatchCommitMicros     float64 `json:"match_commit_us"`
	MatchCommitColdMicros float64 `json:"match_commit_cold_us"`
	// HashMicros is the baseline: hashing the prompt alone.
	HashMicros float64 `json:"hash_only_us"`
	// BlockOpsPerSec counts single-block operations (lookup, pin, lock,
	// one-page match, unlock, unpin) per second on one goroutine.
	BlockOpsPerSec float64 `json:"block_ops_per_sec"`
	// MapOpsPerSec is the baseline: lookups in a plain Go map of the same
	// size.
	MapOpsPerSec float64 `json:"map_ops_per_sec"`
}

// Run measures the index workloads. pages and pageSize shape the prompt
// (512 and 64 make the 32K-token target); iters is the number of timed
// repetitions of each workload.
func Run(pages, pageSize, iters int) (Result, error) {
	if pages <= 0 || pageSize <= 0 || iters <= 0 {
		return Result{}, fmt.Errorf("index bench: pages %d, page size %d and iters %d must be positive: %w",
			pages, pageSize, iters, cache.ErrBadArgument)
	}
	r := Result{Pages: pages, PageSize: pageSize, Iters: iters}
	perOp := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }

	w := NewMatchCommit(pages, pageSize)
	if err := w.Run(0); err != nil { // warm: the prompt is cached from here on
		return r, err
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		if err := w.Run(0); err != nil {
			return r, err
		}
	}
	r.MatchCommitMicros = perOp(time.Since(start), iters)

	var hs blockid.Hashes
	start = time.Now()
	for i := 0; i < iters; i++ {
		hs.Local, hs.Sequence = hs.Local[:0], hs.Sequence[:0]
		hs = blockid.AppendCompute(hs, w.toks, pageSize, w.salt)
	}
	r.HashMicros = perOp(time.Since(start), iters)

	cold := NewMatchCommit(pages, pageSize)
	var coldTime time.Duration
	for i := 0; i < iters; i++ {
		if i%64 == 0 {
			cold.Reset()
		}
		start = time.Now()
		if err := cold.Run(uint32(1_000_000 + i)); err != nil {
			return r, err
		}
		coldTime += time.Since(start)
	}
	r.MatchCommitColdMicros = perOp(coldTime, iters)

	ops := NewBlockOps(4096, 8)
	rounds := max(iters*100, 10000)
	start = time.Now()
	for i := 0; i < rounds; i++ {
		if err := ops.Round(); err != nil {
			return r, err
		}
	}
	r.BlockOpsPerSec = float64(rounds*BlockOpsPerRound) / time.Since(start).Seconds()

	// The baseline's values are records the size of the index's own, so
	// the map spreads over as much memory as the index's records do.
	plain := make(map[uint64]*[cache.PageRecordBytes]byte, len(ops.seqs))
	for _, s := range ops.seqs {
		plain[s] = new([cache.PageRecordBytes]byte)
	}
	hits := 0
	n := rounds * BlockOpsPerRound
	start = time.Now()
	for i := 0; i < n; i++ {
		if plain[ops.seqs[i%len(ops.seqs)]] != nil {
			hits++
		}
	}
	r.MapOpsPerSec = float64(n) / time.Since(start).Seconds()
	if hits != n {
		return r, fmt.Errorf("index bench: map baseline missed %d lookups", n-hits)
	}
	return r, nil
}

// Memory is the index's heap per cached page at a given size.
type Memory struct {
	Pages int `json:"pages"`
	// BytesPerPage is the live heap the index holds (after a forced GC)
	// divided by its cached pages: every map, list and per-page record,
	// including what the index reserves for its tiers' capacity.
	BytesPerPage float64 `json:"bytes_per_page"`
	HeapBytes    uint64  `json:"heap_bytes"`
	// PageRecordBytes is one page's own record (pages that are pinned,
	// retained or leased hold a second, small one). It is most of
	// BytesPerPage; the rest is the sequence-hash map's entry and bucket
	// overhead.
	PageRecordBytes int `json:"page_record_bytes"`
}

// indexMemoryChain is the length of the prompts committed to fill the
// index: long enough that per-chain costs are small, like agent contexts.
const indexMemoryChain = 64

// MeasureMemory fills a fresh index with pages cached pages (chains of 64
// pages of 16 tokens) and reports the heap it then holds.
func MeasureMemory(pages int) (Memory, error) {
	if pages <= 0 {
		return Memory{}, fmt.Errorf("index memory: pages %d must be positive: %w", pages, cache.ErrBadArgument)
	}
	const pageSize = 16
	before := liveHeap()
	ix := benchIndex(pageSize, pages/4+1) // capacity max(4x, 64K) covers pages
	toks := make([]uint32, indexMemoryChain*pageSize)
	locs := make([]uint64, indexMemoryChain)
	var m cache.MatchResult
	var res cache.CommitResult
	for done := 0; done < pages; {
		n := min(indexMemoryChain, pages-done)
		for i := range toks[:n*pageSize] {
			toks[i] = uint32(done*pageSize + i)
		}
		ix.Match("bench", blockid.Salt{}, toks[:n*pageSize], &m)
		for i := range locs[:n] {
			locs[i] = uint64(done + i + 1)
		}
		if err := ix.Commit("bench", m.Hashes, locs[:n], &res); err != nil {
			return Memory{}, fmt.Errorf("index memory: commit at page %d: %w", done, err)
		}
		done += n
	}
	toks, locs, m, res = nil, nil, cache.MatchResult{}, cache.CommitResult{}
	after := liveHeap()
	runtime.KeepAlive(ix)
	held := after - min(before, after)
	return Memory{Pages: pages, HeapBytes: held, BytesPerPage: float64(held) / float64(pages),
		PageRecordBytes: int(cache.PageRecordBytes)}, nil
}

// liveHeap is the heap still reachable after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
