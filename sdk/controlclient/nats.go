package controlclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
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
	// JetStream gives each command a Nats-Msg-Id (the turn id, or a fresh
	// one), by which the host's command stream (nats.jetstream_commands)
	// drops a command sent twice. Without it a command goes out the same
	// way, with no id. Either way the client waits for the host's own
	// answer (natsreply.go); a host without the stream answers directly.
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
	conn    *nats.Conn
	own     bool
	o       NATSOptions
	replies replies
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
	return &NATSClient{conn: conn, o: o}, nil
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
	reply, answers, done, err := c.replies.expect(c.conn)
	if err != nil {
		return err
	}
	defer done()
	msg.Reply = reply
	msg.Header.Set(HeaderReply, reply)
	if c.o.JetStream {
		if id == "" {
			id = nuid.Next()
		}
		msg.Header.Set(HeaderMsgID, id)
	}
	if err := c.conn.PublishMsg(msg); err != nil {
		return fmt.Errorf("publish on %s: %w", c.o.Subject, err)
	}
	data, err := c.await(ctx, answers, id)
	if err != nil {
		return err
	}
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

// QueuedError: the host's command stream (nats.jetstream_commands) stored
// the command, and the host's answer did not come before the caller's
// deadline: the host applies (or refuses) it when it takes it from the
// stream, and what it did is not known here.
type QueuedError struct {
	Subject string
	Stream  string
	Seq     uint64
}

func (e *QueuedError) Error() string {
	return fmt.Sprintf("the command on %s was stored in JetStream stream %s (seq %d), from which the host applies it; its result did not come in time",
		e.Subject, e.Stream, e.Seq)
}

// Stats implements Client: stats are served on the Control socket only,
// so it always fails with wrong_transport.
func (c *NATSClient) Stats(ctx context.Context) (Stats, error) { return c.TenantStats(ctx, "") }

// TenantStats implements Client: stats are served on the Control socket
// only, so it always fails with wrong_transport.
func (c *NATSClient) TenantStats(context.Context, string) (Stats, error) {
	return Stats{}, errcode.New(errcode.WrongTransport, "stats are served on the Control socket, not over NATS")
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
	c.replies.close()
	if c.own {
		c.conn.Close()
	}
	return nil
}
