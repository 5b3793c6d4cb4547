// Package publish delivers the cache index's KV events: it encodes them as
// Dynamo RouterEvents (host/events), publishes each on
// namespace.<ns>.component.<component>.kv-events in the order the index
// applied them, and fans them out to in-process watchers (the Control
// service's WatchEvents) through a Hub.
//
// One goroutine does all of it, so NATS subscribers and watchers see the
// same events in the same order, numbered by one event_id sequence.
//
// While NATS is unreachable, events are handed to the NATS client, which
// buffers them (its reconnect buffer, 8 MiB by default) and sends them in
// order when it reconnects; an event that does not fit is dropped, counted
// by Failed (and kvpilot_events_failed_total) and logged. Core NATS
// delivers at most once, so a subscriber that is itself reconnecting may
// miss events too. Either way no event is
// reordered and event_id has no reuse: a gap tells a router to resync.
// Watchers (the Hub) get every event, outage or not.
package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Config configures a Publisher.
type Config struct {
	// Conn publishes the events; nil publishes to watchers only.
	Conn *nats.Conn
	// Subject is events.Subject(namespace, component).
	Subject string
	// WorkerID and DPRank stamp every event.
	WorkerID uint64
	DPRank   uint32
	// Hub receives every event for watchers; nil: a new one (see Hub()).
	Hub *Hub
	// Metrics, when set, exports Published and Failed as
	// kvpilot_events_published_total and kvpilot_events_failed_total, and
	// the hub's overflowed watchers as kvpilot_event_watchers_overflowed_total.
	Metrics *metrics.Metrics
	// Log receives publish failures; nil discards them.
	Log hclog.Logger
}

// Publisher consumes an events.Queue. Run it on one goroutine.
type Publisher struct {
	cfg    Config
	enc    events.Encoder
	batch  []events.RouterEvent
	sent   atomic.Uint64
	failed atomic.Uint64
	// silent is a bit per tier whose events are not announced (Silence).
	silent atomic.Uint32
	kept   []cache.Event
}

// New checks cfg and returns a Publisher.
func New(cfg Config) (*Publisher, error) {
	if cfg.Conn != nil && cfg.Subject == "" {
		return nil, errors.New("publish: a NATS connection needs a subject")
	}
	if cfg.Hub == nil {
		cfg.Hub = NewHub()
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.Metrics != nil {
		cfg.Hub.countOverflows(cfg.Metrics.EventWatchersOverflowed)
	}
	return &Publisher{cfg: cfg, enc: events.Encoder{WorkerID: cfg.WorkerID, DPRank: cfg.DPRank}}, nil
}

// Hub is where watchers subscribe.
func (p *Publisher) Hub() *Hub { return p.cfg.Hub }

// Run publishes q's events until ctx ends, then publishes what was left in
// the queue and returns.
func (p *Publisher) Run(ctx context.Context, q *events.Queue) {
	q.Run(ctx, p.Consume)
}

// Silence stops (on) or resumes announcing tier t's events, to NATS and to
// watchers alike. A connector-mode engine announces its own device blocks,
// so the host's staging tier goes silent while one is registered
// (host/engine/mode.go). Safe to call from any goroutine.
func (p *Publisher) Silence(t tier.Tier, on bool) {
	bit := uint32(1) << uint(t)
	for {
		old := p.silent.Load()
		next := old &^ bit
		if on {
			next = old | bit
		}
		if p.silent.CompareAndSwap(old, next) {
			return
		}
	}
}

// audible drops the events of silenced tiers; event ids stay contiguous
// because they are numbered after this.
func (p *Publisher) audible(evs []cache.Event) []cache.Event {
	mask := p.silent.Load()
	if mask == 0 {
		return evs
	}
	p.kept = p.kept[:0]
	for _, ev := range evs {
		if mask&(uint32(1)<<uint(ev.Tier)) == 0 {
			p.kept = append(p.kept, ev)
		}
	}
	return p.kept
}

// Consume publishes one batch of index events, in order. It is exported for
// callers that drain the index themselves; it must not be called
// concurrently with itself or Run.
func (p *Publisher) Consume(evs []cache.Event) {
	p.batch = p.enc.Encode(p.batch[:0], p.audible(evs))
	if p.cfg.Conn != nil {
		for i := range p.batch {
			if err := p.publish(&p.batch[i]); err != nil {
				// nats.go buffers while reconnecting; an error here means
				// the connection is closed or the buffer is full. The
				// event is lost for NATS subscribers, so say so loudly.
				p.failed.Add(1)
				if p.cfg.Metrics != nil {
					p.cfg.Metrics.EventsFailed.Inc()
				}
				p.cfg.Log.Error("KV event not published", "subject", p.cfg.Subject,
					"event_id", p.batch[i].Event.EventID, "error", err)
				continue
			}
			p.sent.Add(1)
			if p.cfg.Metrics != nil {
				p.cfg.Metrics.EventsPublished.Inc()
			}
		}
	}
	p.cfg.Hub.Broadcast(p.batch)
	// The hub's watchers hold the events now; the next batch must not
	// reuse their backing arrays (Encode allocates each event's data, and
	// the slice itself is only reused for RouterEvent headers, copied by
	// value into the watchers' channels).
}

func (p *Publisher) publish(ev *events.RouterEvent) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return p.cfg.Conn.Publish(p.cfg.Subject, data)
}

// Published and Failed count events sent to NATS and events that could not be.
func (p *Publisher) Published() uint64 { return p.sent.Load() }
func (p *Publisher) Failed() uint64    { return p.failed.Load() }
