package publish

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvpilot/kvpilot/host/events"
)

// ErrOverflow ends a watch whose reader fell behind: its buffer filled, and
// the host will not block the event path nor skip events silently. The
// watcher must resynchronize (re-read the cache state) and watch again.
var ErrOverflow = errors.New("watcher fell behind the event stream")

// DefaultWatchBuffer is the events one watcher may have waiting.
const DefaultWatchBuffer = 4096

// Hub fans events out to in-process watchers. Broadcast never blocks: each
// watcher has a bounded buffer, and a watcher whose buffer is full is ended
// with ErrOverflow instead of delaying the publisher or losing events
// without saying so.
type Hub struct {
	mu   sync.Mutex
	subs map[*Watch]struct{}
	// overflowed counts watchers ended with ErrOverflow; metric, when
	// set, is told too. Both guarded by mu.
	overflowed uint64
	metric     prometheus.Counter
}

// NewHub returns a hub with no watchers.
func NewHub() *Hub { return &Hub{subs: map[*Watch]struct{}{}} }

// Watch is one watcher's subscription.
type Watch struct {
	hub    *Hub
	ch     chan events.RouterEvent
	filter func(*events.RouterEvent) bool
	err    error // set before ch is closed by the hub; read after the close
	closed bool  // guarded by hub.mu
}

// Subscribe registers a watcher with room for buf waiting events (<= 0:
// DefaultWatchBuffer). filter, when set, selects the events it wants.
func (h *Hub) Subscribe(buf int, filter func(*events.RouterEvent) bool) *Watch {
	if buf <= 0 {
		buf = DefaultWatchBuffer
	}
	w := &Watch{hub: h, ch: make(chan events.RouterEvent, buf), filter: filter}
	h.mu.Lock()
	h.subs[w] = struct{}{}
	h.mu.Unlock()
	return w
}

// Events delivers the watcher's events in publish order. It is closed when
// the watcher overflowed (Err says so) or was closed.
func (w *Watch) Events() <-chan events.RouterEvent { return w.ch }

// Err is ErrOverflow (wrapped with the buffer size) once Events was closed
// because the watcher fell behind, and nil otherwise.
func (w *Watch) Err() error {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.err
}

// Close unsubscribes; it is idempotent.
func (w *Watch) Close() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if !w.closed {
		w.closed = true
		delete(h.subs, w)
		close(w.ch)
	}
}

// Watchers is the number of subscribed watchers.
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Overflowed is the number of watchers ended with ErrOverflow so far.
func (h *Hub) Overflowed() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.overflowed
}

// countOverflows exports overflows on c from now on.
func (h *Hub) countOverflows(c prometheus.Counter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.metric = c
}

// Broadcast hands evs, in order, to every watcher that wants them. The
// events must not be modified afterwards: watchers share them.
func (h *Hub) Broadcast(evs []events.RouterEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.subs {
		for i := range evs {
			if w.filter != nil && !w.filter(&evs[i]) {
				continue
			}
			select {
			case w.ch <- evs[i]:
			default:
				w.err = fmt.Errorf("%w: %d events were waiting", ErrOverflow, cap(w.ch))
				h.overflowed++
				if h.metric != nil {
					h.metric.Inc()
				}
				w.closed = true
				delete(h.subs, w)
				close(w.ch)
			}
			if w.closed {
				break
			}
		}
	}
}
