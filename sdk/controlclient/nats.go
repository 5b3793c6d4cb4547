package controlclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/kvevent"
)

// NATSOptions configure a NATS client.
type NATSOptions struct {
	// Subject receives the commands: kv-control-<worker_id> for one
	// worker, kv-control-broadcast for all (the first answer wins).
	// Required.
	Subject string
	// EventsSubject is where Watch listens (default
	// namespace.dynamo.component.backend.endpoint.generate.kv-events, the
	// default configuration's Dynamo-format subject). Watch reads either
	// format (events.format dynamo or json).
	EventsSubject string
	// Source is sent as the Kvpilot-Source header: the host's audit log
	// and rate limit key.
	Source string
	// JetStream publishes through the host's command stream: durable, and
	// deduplicated by Nats-Msg-Id (the turn id, or a fresh one). The host
	// sends the result to an inbox named in the Kvpilot-Reply header.
	JetStream bool
}

// DefaultEventsSubject is the events subject of the default configuration.
const DefaultEventsSubject = "namespace.dynamo.component.backend.endpoint.generate.kv-events"

// ErrDuplicate is returned in JetStream mode when the stream already had a
// command with the same Nats-Msg-Id: it was (or will be) applied once, and
// this copy produces no result.
var ErrDuplicate = errors.New("duplicate command: the stream already has this Nats-Msg-Id")

// NATSClient sends commands over NATS.
type NATSClient struct {
	conn *nats.Conn
	own  bool
	o    NATSOptions
	js   jetstream.JetStream
}

var _ Client = (*NATSClient)(nil)

// NewNATS uses an existing connection; Close leaves it open.
func NewNATS(conn *nats.Conn, o NATSOptions) (*NATSClient, error) {
	if o.Subject == "" {
		return nil, errors.New("controlclient: NATSOptions.Subject is required (e.g. kv-control-0)")
	}
	if o.EventsSubject == "" {
		o.EventsSubject = DefaultEventsSubject
	}
	c := &NATSClient{conn: conn, o: o}
	if o.JetStream {
		js, err := jetstream.New(conn)
		if err != nil {
			return nil, fmt.Errorf("controlclient: jetstream: %w", err)
		}
		c.js = js
	}
	return c, nil
}

// ConnectNATS connects to url (with any nats.Option: credentials, TLS) and
// owns the connection.
func ConnectNATS(url string, o NATSOptions, opts ...nats.Option) (*NATSClient, error) {
	conn, err := nats.Connect(url, append([]nats.Option{nats.Name("kvpilot-ctl")}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", url, err)
	}
	c, err := NewNATS(conn, o)
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.own = true
	return c, nil
}

// Conn is the NATS connection.
func (c *NATSClient) Conn() *nats.Conn { return c.conn }

// Apply implements Client: the turn travels as a JSON envelope
// {"id","tenant","directives":[...]}.
func (c *NATSClient) Apply(ctx context.Context, t directive.Turn) (directive.TurnReply, error) {
	t.Source = ""
	payload, err := t.AppendJSON(make([]byte, 0, 256))
	if err != nil {
		return directive.TurnReply{}, fmt.Errorf("encode turn: %w", err)
	}
	var r directive.TurnReply
	err = c.request(ctx, payload, "", t.ID, &r)
	return r, err
}

// CacheControl implements Client; the tenant travels in the Kvpilot-Tenant header.
func (c *NATSClient) CacheControl(ctx context.Context, cc directive.CacheControl, tenant string) (directive.CacheControlReply, error) {
	payload, err := json.Marshal(cc)
	if err != nil {
		return directive.CacheControlReply{}, fmt.Errorf("encode cache_control: %w", err)
	}
	var r directive.CacheControlReply
	err = c.request(ctx, payload, tenant, "", &r)
	return r, err
}

// Request sends a raw JSON command (a turn in any form, or cache_control)
// and returns the host's raw JSON answer.
func (c *NATSClient) Request(ctx context.Context, payload []byte, tenant string) ([]byte, error) {
	var raw json.RawMessage
	err := c.request(ctx, payload, tenant, "", &raw)
	return raw, err
}

func (c *NATSClient) request(ctx context.Context, payload []byte, tenant, id string, out any) error {
	msg := nats.NewMsg(c.o.Subject)
	msg.Data = payload
	if c.o.Source != "" {
		msg.Header.Set(HeaderSource, c.o.Source)
	}
	if tenant != "" {
		msg.Header.Set(HeaderTenant, tenant)
	}
	var data []byte
	if c.js == nil {
		resp, err := c.conn.RequestMsgWithContext(ctx, msg)
		if errors.Is(err, nats.ErrNoResponders) {
			return errcode.Wrap(errcode.Unavailable, err, "no kvpilot host listens on %s", c.o.Subject)
		}
		if err != nil {
			return fmt.Errorf("request on %s: %w", c.o.Subject, err)
		}
		data = resp.Data
	} else {
		inbox := c.conn.NewRespInbox()
		sub, err := c.conn.SubscribeSync(inbox)
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", inbox, err)
		}
		defer sub.Unsubscribe()
		if id == "" {
			id = nuid.Next()
		}
		msg.Header.Set(HeaderReply, inbox)
		msg.Header.Set(HeaderMsgID, id)
		ack, err := c.js.PublishMsg(ctx, msg)
		if errors.Is(err, jetstream.ErrInvalidJSAck) {
			// A host subscribed to the subject answered in the stream's
			// place: it applied the command as a plain request.
			return errcode.Wrap(errcode.Unavailable, err,
				"the host on %s took the command as a plain request (it was applied) and keeps no command stream: it runs without nats.jetstream_commands; send without JetStream (drop --jetstream)", c.o.Subject)
		}
		if err != nil {
			return errcode.Wrap(errcode.Unavailable, err,
				"publish on %s through JetStream: no stream takes that subject unless the host runs with nats.jetstream_commands: true", c.o.Subject)
		}
		if ack.Duplicate {
			return fmt.Errorf("%w (id %s, stream %s seq %d)", ErrDuplicate, id, ack.Stream, ack.Sequence)
		}
		resp, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fmt.Errorf("wait for the result on %s: %w", inbox, err)
		}
		data = resp.Data
	}
	if q := queuedIn(data); q != nil && c.js == nil {
		q.Subject = c.o.Subject
		return q
	}
	var err error
	if r, ok := out.(*directive.TurnReply); ok {
		*r, err = directive.DecodeTurnReply(data) // without reflection for the host's plain answers
	} else {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		return fmt.Errorf("decode the host's answer %.200q: %w", data, err)
	}
	return nil
}

// QueuedError: a plain request met a host that takes its commands through
// JetStream (nats.jetstream_commands). The stream stored the command, and
// the host applies it from there, but the answer the request got is the
// stream's acknowledgement, not the command's result. Send with
// NATSOptions.JetStream (ctl --jetstream) to wait for the result.
type QueuedError struct {
	Subject string
	Stream  string
	Seq     uint64
}

func (e *QueuedError) Error() string {
	return fmt.Sprintf("the command on %s was stored in JetStream stream %s (seq %d), which the host applies it from; its result is not known here: send with --jetstream to wait for it",
		e.Subject, e.Stream, e.Seq)
}

// queuedIn recognises a JetStream publish acknowledgement ({"stream",
// "seq"}, no "status"), which a host's command stream sends in place of
// the host's answer.
func queuedIn(data []byte) *QueuedError {
	if bytes.Contains(data, []byte(`"status"`)) {
		return nil // every answer of the host's has one; skip a second decode
	}
	var ack struct {
		Stream string          `json:"stream"`
		Seq    uint64          `json:"seq"`
		Status json.RawMessage `json:"status"`
	}
	if json.Unmarshal(data, &ack) != nil || ack.Stream == "" || ack.Status != nil {
		return nil
	}
	return &QueuedError{Stream: ack.Stream, Seq: ack.Seq}
}

// Stats implements Client: stats are served on the Control socket only.
func (c *NATSClient) Stats(ctx context.Context) (Stats, error) { return c.TenantStats(ctx, "") }

// TenantStats implements Client: stats are served on the Control socket
// only.
func (c *NATSClient) TenantStats(context.Context, string) (Stats, error) {
	return Stats{}, errcode.New(errcode.Unavailable, "stats are served on the Control socket only (use --socket)")
}

// Watch implements Client: it subscribes to the events subject.
func (c *NATSClient) Watch(ctx context.Context, o WatchOptions, fn func(Event) error) error {
	if o.Tenant != "" {
		return errcode.New(errcode.BadRequest, "the NATS event JSON carries no tenant; watch by tenant on the Control socket")
	}
	var tiers []string
	for _, name := range o.Tiers {
		n, err := directive.ParseTierName(name)
		if err != nil {
			return err
		}
		tiers = append(tiers, map[directive.TierName]string{"device": "device", "host": "host_pinned", "disk": "disk", "remote": "external"}[n])
	}
	ch := make(chan *nats.Msg, 4096)
	sub, err := c.conn.ChanSubscribe(c.o.EventsSubject, ch)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", c.o.EventsSubject, err)
	}
	defer sub.Unsubscribe()
	if err := c.conn.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("subscribe %s: %w", c.o.EventsSubject, err)
	}
	if o.Ready != nil {
		o.Ready()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-ch:
			evs, err := kvevent.DecodeMessage(m.Data)
			if err != nil {
				return fmt.Errorf("event on %s: %w", m.Subject, err)
			}
			for _, ev := range evs {
				if len(tiers) > 0 && !slices.Contains(tiers, ev.StorageTier) {
					continue
				}
				if err := fn(ev); err != nil {
					if errors.Is(err, ErrStop) {
						return nil
					}
					return err
				}
			}
		}
	}
}

// Close implements Client; it closes the connection only if ConnectNATS
// opened it.
func (c *NATSClient) Close() error {
	if c.own {
		c.conn.Close()
	}
	return nil
}
