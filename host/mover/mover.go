// Package mover carries out the cache index's transition plans on the real
// pools: it copies page bytes between tiers and frees
// copies, asynchronously, and reports each completion back to the index,
// which only then changes residency and emits events. Every batch has a
// completion fence: a Fence is done when every transition in it was
// completed, refused by the index, or failed and reported.
//
// The index is not safe for concurrent use; the mover takes the guarded
// index's lock (the host's one index lock) around every index call and
// never holds it during I/O.
//
// Rules that keep the index consistent whatever fails:
//   - A copy writes the destination first and calls CompleteCopy after; if
//     the index refuses, the destination slot (or stored object the index
//     does not know) is freed. If the copy cannot be done it calls
//     FailTransition, after freeing what it allocated.
//   - A drop calls CompleteDrop first and frees the source only after the
//     index accepted, so the index never points at freed memory. When the
//     index answers ErrTransitionOrder (the drop must follow a copy, or its
//     children's drops from the same tier, not yet reported) the drop waits,
//     without holding a worker, and tries again each time another
//     transition is reported, whichever batch it belongs to.
//   - A read that finds a stored page corrupt (the store has dropped it),
//     or a host-tier page that fails its seal (seal.go), tells the index
//     with LoseCopy, which forgets that copy and the descendants' copies on
//     the same tier; the mover frees those.
//   - A transition waits for the one named in its After field; when that
//     one fails, the index has cancelled it and the mover reports it
//     failed without doing any I/O.
//   - Transfers that may succeed on a second try (a remote timeout) are
//     retried with backoff; a full pool, a corrupt page or a missing page
//     are not.
package mover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Sentinel errors.
var (
	// ErrNoPool: a transition names a tier with no pool.
	ErrNoPool = errors.New("no pool for tier")
	// ErrIncomplete: a load-back, warm or pause did not move every page
	// (some failed, or the deadline passed).
	ErrIncomplete = errors.New("transfer incomplete")
	// ErrPageGone: the page left the index while its copy ran.
	ErrPageGone = errors.New("page left the index")
)

// Pools gives the mover each tier's pool; *tiers.Set implements it.
type Pools interface {
	Memory(t tier.Tier) pool.Memory
	Store(t tier.Tier) pool.Store
}

// Options configure a Mover.
type Options struct {
	// Index is the cache index with the lock the rest of the host uses for
	// it; the mover takes it around every index call.
	Index *guarded.Index
	// Pools are the tiers' pools, all of one layout.
	Pools Pools
	// Workers bounds concurrent transfers (default 8).
	Workers int
	// Retries is how many times a retryable transfer is tried again
	// (default 2), waiting RetryBackoff (default 20ms), doubled each time.
	Retries      int
	RetryBackoff time.Duration
	// DropWait bounds how long a drop waits for what it must follow (the
	// copy a demotion waits for, copies still reading the page, its
	// children's drops) before it is given up (default 5s); a given-up
	// drop is planned again by a later Plan.
	DropWait time.Duration
	// OnFailure is told of every transfer that failed, by source and
	// destination tier (a drop's destination is its source), for metrics;
	// nil: not counted. It must not block.
	OnFailure func(from, to tier.Tier)
	// OnCopy is told of every page copy the index accepted: its source and
	// destination tier, its bytes and how long its read, write and index
	// report took (not its waits for other transitions or a worker), for
	// metrics; nil: not counted. It must not block.
	OnCopy func(from, to tier.Tier, bytes int64, took time.Duration)
	// Logger; nil discards. Failure lines are rate-limited per tier pair
	// (failures.go).
	Logger hclog.Logger
}

// Mover executes transitions. It is safe for concurrent use.
type Mover struct {
	ix    *guarded.Index
	pools Pools
	o     Options
	log   hclog.Logger
	sem   chan struct{}
	pb    int
	bufs  sync.Pool
	syncs [tier.Count]*groupSync

	failures failureLog
	fails    *failGroup // given-up transitions, reported in groups (failgroup.go)
	seals    *seals     // the host tier's page checksums (seal.go)

	mu   sync.Mutex
	done map[uint64]*flight // transitions in flight, by id, for After waits
	// progress is closed (and cleared) each time a transition is reported:
	// drops the index asked to wait retry then.
	progress chan struct{}
}

// flight is one submitted transition; done closes when it is reported.
type flight struct {
	done chan struct{}
	ok   bool
}

// New returns a Mover.
func New(o Options) (*Mover, error) {
	if o.Index == nil || o.Pools == nil {
		return nil, fmt.Errorf("mover: index and pools are required")
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.Retries < 0 {
		o.Retries = 0
	} else if o.Retries == 0 {
		o.Retries = 2
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 20 * time.Millisecond
	}
	if o.DropWait <= 0 {
		o.DropWait = 5 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	m := &Mover{ix: o.Index, pools: o.Pools, o: o, log: log.Named("mover"),
		sem: make(chan struct{}, o.Workers), done: map[uint64]*flight{}, failures: failureLog{now: time.Now}}
	m.fails = newFailGroup(m.reportFailed)
	for _, t := range tier.All {
		var p pool.Pool
		if mp := o.Pools.Memory(t); mp != nil {
			p = mp
		} else if sp := o.Pools.Store(t); sp != nil {
			p = sp
			m.syncs[t] = newGroupSync(sp.Sync)
		}
		if p == nil {
			continue
		}
		pb := p.Layout().PageBytes()
		if m.pb != 0 && m.pb != pb {
			return nil, fmt.Errorf("mover: pools disagree on the page size (%d and %d bytes): one layout per mover", m.pb, pb)
		}
		m.pb = pb
	}
	if m.pb == 0 {
		return nil, fmt.Errorf("mover: no pools")
	}
	m.bufs.New = func() any { b := make([]byte, m.pb); return &b }
	m.seals = newSeals(o.Pools.Memory(tier.Host))
	return m, nil
}

// Fence is the completion fence of one submitted batch.
type Fence struct {
	done   chan struct{}
	mu     sync.Mutex
	report Report
	wg     sync.WaitGroup
}

// Done is closed when every transition of the batch has been reported.
func (f *Fence) Done() <-chan struct{} { return f.done }

// Wait blocks until the batch is done or ctx ends, and returns its report.
// The transfers themselves stop at the deadline of the ctx given to Submit.
func (f *Fence) Wait(ctx context.Context) (Report, error) {
	select {
	case <-f.done:
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.report.clone(), nil
	case <-ctx.Done():
		return Report{}, fmt.Errorf("waiting for transfers: %w", ctx.Err())
	}
}

func (f *Fence) add(o outcome) {
	f.mu.Lock()
	f.report.add(o)
	f.mu.Unlock()
}

// Submit starts the batch's transitions and returns its fence at once.
// ctx bounds the transfers: at its end, those not yet done are failed.
func (m *Mover) Submit(ctx context.Context, ts []cache.Transition) *Fence {
	f := &Fence{done: make(chan struct{})}
	order := m.dropOrder(ts)
	m.mu.Lock()
	for _, t := range ts {
		m.done[t.ID] = &flight{done: make(chan struct{})}
	}
	m.mu.Unlock()
	f.wg.Add(len(ts))
	for _, t := range ts {
		go func() {
			defer f.wg.Done()
			o := m.execute(ctx, t, order[t.ID])
			m.mu.Lock()
			fl := m.done[t.ID]
			delete(m.done, t.ID)
			fl.ok = o.err == nil && !o.refused
			close(fl.done)
			if m.progress != nil {
				close(m.progress)
				m.progress = nil
			}
			m.mu.Unlock()
			f.add(o)
		}()
	}
	go func() {
		f.wg.Wait()
		close(f.done)
	}()
	return f
}

// Run submits ts and waits for the fence.
func (m *Mover) Run(ctx context.Context, ts []cache.Transition) Report {
	r, _ := m.Submit(ctx, ts).Wait(context.Background())
	return r
}

// dropOrder makes a parent's drop wait for its children's drops from the
// same tier in the batch. The index plans a whole subtree's drops at once
// (children first) and answers a parent's drop that comes first with
// ErrTransitionOrder; the drop would then wait and retry (see completeDrop),
// which this ordering spares within a batch.
func (m *Mover) dropOrder(ts []cache.Transition) map[uint64][]uint64 {
	type where struct {
		tenant string
		seq    uint64
		t      tier.Tier
	}
	var drops map[where]uint64
	for _, t := range ts {
		if t.Kind == cache.Drop {
			if drops == nil {
				drops = map[where]uint64{}
			}
			drops[where{t.Tenant, t.Seq, t.From}] = t.ID
		}
	}
	if drops == nil {
		return nil
	}
	order := map[uint64][]uint64{}
	m.ix.Do(func(ix *cache.Index) {
		for _, t := range ts {
			if t.Kind != cache.Drop {
				continue
			}
			if pi, ok := ix.Lookup(t.Tenant, t.Seq); ok && pi.HasParent {
				if pid, ok := drops[where{t.Tenant, pi.Parent, t.From}]; ok {
					order[pid] = append(order[pid], t.ID)
				}
			}
		}
	})
	return order
}

// progressed returns a channel that is closed when the next transition is
// reported. Take it before asking the index, so a report in between is not
// missed.
func (m *Mover) progressed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.progress == nil {
		m.progress = make(chan struct{})
	}
	return m.progress
}

// waitAfter waits for transition id (if it is in flight here) and reports
// whether it succeeded. An id not in flight has completed earlier.
func (m *Mover) waitAfter(ctx context.Context, id uint64) (bool, error) {
	if id == 0 {
		return true, nil
	}
	m.mu.Lock()
	fl := m.done[id]
	m.mu.Unlock()
	if fl == nil {
		return true, nil
	}
	select {
	case <-fl.done:
		return fl.ok, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (m *Mover) getBuf() *[]byte  { return m.bufs.Get().(*[]byte) }
func (m *Mover) putBuf(b *[]byte) { m.bufs.Put(b) }
