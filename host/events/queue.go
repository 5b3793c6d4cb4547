package events

import (
	"context"
	"sync"

	"github.com/kvpilot/kvpilot/host/cache"
)

// Queue carries index events from the index (which emits them under the
// host's lock and must never block) to the goroutine that publishes them.
// Push appends and returns at once; Run hands the consumer every event in
// push order, in batches. The queue is unbounded on purpose: dropping an
// event would leave routers with a wrong view of the cache, and the
// consumer's backlog is visible through Len.
type Queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []cache.Event
	closed bool
}

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	q := &Queue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Push appends ev. It is safe to call from the index's OnEvent hook.
func (q *Queue) Push(ev cache.Event) {
	q.mu.Lock()
	if !q.closed {
		q.buf = append(q.buf, ev)
	}
	q.mu.Unlock()
	q.cond.Signal()
}

// Len is the number of events waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}

// Run calls consume with each batch of waiting events, in order, until ctx
// ends or Close is called; it then hands over what is left and returns.
// consume must not keep the slice: its array is reused for a later batch.
func (q *Queue) Run(ctx context.Context, consume func([]cache.Event)) {
	stop := context.AfterFunc(ctx, q.Close)
	defer stop()
	var batch []cache.Event
	for {
		q.mu.Lock()
		for len(q.buf) == 0 && !q.closed {
			q.cond.Wait()
		}
		batch, q.buf = q.buf, batch[:0]
		closed := q.closed
		q.mu.Unlock()
		if len(batch) > 0 {
			consume(batch)
		}
		if closed {
			q.mu.Lock()
			rest := q.buf
			q.buf = nil
			q.mu.Unlock()
			if len(rest) > 0 {
				consume(rest)
			}
			return
		}
	}
}

// Close stops Run after it has handed over the waiting events; later pushes
// are discarded.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}
