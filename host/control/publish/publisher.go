// Package publish delivers the cache index's KV events: it encodes them as
// Dynamo RouterEvents (host/events), publishes them to NATS in the order the
// index applied them, and fans them out to in-process watchers (the Control
// service's WatchEvents) through a Hub.
//
// Two wire formats (events.format):
//   - FormatDynamo, what Dynamo's KV router reads (ai-dynamo 1.6.1 with its
//     event plane on NATS): each batch is one MessagePack message in
//     Dynamo's event-plane envelope (sdk/kvevent/envelope.go) on
//     namespace.<ns>.component.<component>.endpoint.<endpoint>.kv-events,
//     with event ids counting from 1 as Dynamo's publisher's do;
//   - FormatJSON, one plain JSON RouterEvent per message on
//     namespace.<ns>.component.<component>.kv-events, for tools.
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
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/tinylib/msgp/msgp"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/kvevent"
)

// Format is a wire format of the published events.
type Format string

const (
	// FormatDynamo is MessagePack in Dynamo's event-plane envelope.
	FormatDynamo Format = "dynamo"
	// FormatJSON is one JSON RouterEvent per message.
	FormatJSON Format = "json"
)

// maxEnvelopeBytes bounds the encoded events one envelope carries, keeping
// a message well under NATS's default 1 MiB payload limit (a stored block
// costs about 60 bytes). One event larger than this still goes alone.
const maxEnvelopeBytes = 256 << 10

// Config configures a Publisher.
type Config struct {
	// Conn publishes the events; nil publishes to watchers only.
	Conn *nats.Conn
	// Subject is events.DynamoSubject(namespace, component, endpoint) for
	// FormatDynamo, events.Subject(namespace, component) for FormatJSON.
	Subject string
	// Format is the wire format; "" is FormatJSON.
	Format Format
	// PublisherID names this publisher in Dynamo's envelope; 0 picks a
	// random one, as Dynamo's publishers do.
	PublisherID uint64
	// Now stamps published_at; nil is time.Now.
	Now func() time.Time
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
	// seq numbers envelopes (FormatDynamo); encoded, payload and buf are
	// reused for them.
	seq     uint64
	encoded []byte
	payload []byte
	buf     []byte
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
	switch cfg.Format {
	case "":
		cfg.Format = FormatJSON
	case FormatJSON, FormatDynamo:
	default:
		return nil, fmt.Errorf("publish: unknown event format %q (want %q or %q)", cfg.Format, FormatDynamo, FormatJSON)
	}
	if cfg.PublisherID == 0 {
		cfg.PublisherID = rand.Uint64() | 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Publisher{cfg: cfg, enc: events.Encoder{WorkerID: cfg.WorkerID, DPRank: cfg.DPRank}}
	if cfg.Format == FormatDynamo {
		p.enc.StartAt(1)
	}
	return p, nil
}

// PublisherID is the publisher_id in this publisher's envelopes.
func (p *Publisher) PublisherID() uint64 { return p.cfg.PublisherID }

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
		if p.cfg.Format == FormatDynamo {
			p.publishEnvelopes(p.batch)
		} else {
			for i := range p.batch {
				data, err := json.Marshal(&p.batch[i])
				if err != nil {
					err = fmt.Errorf("encode event: %w", err)
				} else {
					err = p.cfg.Conn.Publish(p.cfg.Subject, data)
				}
				p.count(p.batch[i:i+1], err)
			}
		}
	}
	p.cfg.Hub.Broadcast(p.batch)
	// The hub's watchers hold the events now; the next batch must not
	// reuse their backing arrays (Encode allocates each event's data, and
	// the slice itself is only reused for RouterEvent headers, copied by
	// value into the watchers' channels).
}

// publishEnvelopes sends evs, in order, as event-plane messages of at most
// about maxEnvelopeBytes each.
func (p *Publisher) publishEnvelopes(evs []events.RouterEvent) {
	p.encoded = p.encoded[:0]
	first, from := 0, 0
	for i := range evs {
		if i > first && len(p.encoded)-from > maxEnvelopeBytes {
			p.publishEnvelope(evs[first:i], p.encoded[from:])
			first, from = i, len(p.encoded)
		}
		p.encoded = kvevent.AppendMsgpack(p.encoded, &evs[i])
	}
	if first < len(evs) {
		p.publishEnvelope(evs[first:], p.encoded[from:])
	}
}

// publishEnvelope sends evs, already encoded one after another in enc, as
// one event-plane message. The envelope's sequence advances whether or not
// the send succeeds, so a lost message shows as a gap to a subscriber that
// checks it.
func (p *Publisher) publishEnvelope(evs []events.RouterEvent, enc []byte) {
	p.payload = append(msgp.AppendArrayHeader(p.payload[:0], uint32(len(evs))), enc...)
	env := kvevent.Envelope{PublisherID: p.cfg.PublisherID, Sequence: p.seq,
		PublishedAt: uint64(p.cfg.Now().UnixMilli()), Topic: kvevent.Topic, Payload: p.payload}
	p.seq++
	// nats.go copies the message into its buffer, so buf can be reused.
	p.buf = kvevent.AppendEnvelope(p.buf[:0], &env)
	p.count(evs, p.cfg.Conn.Publish(p.cfg.Subject, p.buf))
}

// count records the outcome of publishing evs.
func (p *Publisher) count(evs []events.RouterEvent, err error) {
	n := uint64(len(evs))
	if err != nil {
		// nats.go buffers while reconnecting; an error here means the
		// connection is closed or the buffer is full. The events are
		// lost for NATS subscribers, so say so loudly.
		p.failed.Add(n)
		if p.cfg.Metrics != nil {
			p.cfg.Metrics.EventsFailed.Add(float64(n))
		}
		p.cfg.Log.Error("KV events not published", "subject", p.cfg.Subject,
			"first_event_id", evs[0].Event.EventID, "events", n, "error", err)
		return
	}
	p.sent.Add(n)
	if p.cfg.Metrics != nil {
		p.cfg.Metrics.EventsPublished.Add(float64(n))
	}
}

// Published and Failed count events sent to NATS and events that could not be.
func (p *Publisher) Published() uint64 { return p.sent.Load() }
func (p *Publisher) Failed() uint64    { return p.failed.Load() }
