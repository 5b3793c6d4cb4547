package natscmd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// startJetStream makes sure the command stream covers this worker's
// subjects and starts this worker's durable consumer.
//
// Hosts sharing a cluster share one stream: each adds its worker subject to
// it (stream subjects may not overlap between streams, and every host
// listens on the broadcast subject). The stream keeps commands by age
// (limits retention), so a broadcast command stays for every worker's
// consumer, each of which filters its own two subjects (four with tenant
// subjects: <subject>.* for each).
func (s *Server) startJetStream(ctx context.Context) error {
	js, err := jetstream.New(s.cfg.Conn)
	if err != nil {
		return fmt.Errorf("natscmd: jetstream: %w", err)
	}
	stream, err := s.ensureStream(ctx, js)
	if err != nil {
		return err
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:        s.cfg.Durable,
		Description:    "kvpilot worker " + string(s.worker) + " commands",
		FilterSubjects: s.subjects(),
		AckPolicy:      jetstream.AckExplicitPolicy,
		// A new consumer starts at commands published from now on; an
		// existing one resumes where it stopped.
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1024,
	})
	if err != nil {
		return fmt.Errorf("natscmd: consumer %s on stream %s: %w", s.cfg.Durable, s.cfg.Stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return fmt.Errorf("natscmd: consume %s: %w", s.cfg.Durable, err)
	}
	s.iter = it
	s.wg.Add(1)
	go s.consume(it)
	s.cfg.Log.Info("NATS command plane consuming from JetStream", "stream", s.cfg.Stream, "consumer", s.cfg.Durable, "subjects", s.subjects())
	return nil
}

func (s *Server) ensureStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	stream, err := js.Stream(ctx, s.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        s.cfg.Stream,
			Description: "kvpilot directive commands (kv-control-*)",
			Subjects:    s.subjects(),
			Storage:     jetstream.FileStorage,
			Replicas:    max(s.cfg.StreamReplicas, 1),
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      s.cfg.MaxAge,
			Duplicates:  s.cfg.DuplicateWindow,
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("natscmd: create command stream %s: %w", s.cfg.Stream, err)
		}
		if err == nil {
			return stream, nil
		}
		stream, err = js.Stream(ctx, s.cfg.Stream) // another host created it meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("natscmd: command stream %s: %w", s.cfg.Stream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("natscmd: command stream %s: %w", s.cfg.Stream, err)
	}
	cfg := info.Config
	missing := false
	for _, sub := range s.subjects() {
		if !slices.Contains(cfg.Subjects, sub) {
			cfg.Subjects = append(cfg.Subjects, sub)
			missing = true
		}
	}
	if !missing {
		return stream, nil
	}
	stream, err = js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("natscmd: add %v to command stream %s: %w", s.subjects(), s.cfg.Stream, err)
	}
	return stream, nil
}

// consume applies the consumer's messages one at a time, in stream order,
// acknowledging each after it was applied.
func (s *Server) consume(it jetstream.MessagesContext) {
	defer s.wg.Done()
	for {
		msg, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			// Heartbeats missed while the server restarts: the iterator
			// recovers by itself; avoid spinning meanwhile.
			s.cfg.Log.Debug("JetStream command consumer", "error", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		s.onJetStream(msg)
	}
}

func (s *Server) onJetStream(msg jetstream.Msg) {
	h := msg.Headers()
	id := h.Get(headerMsgID)
	if id != "" && s.seen.has(id) {
		// Applied already; only the ack was lost.
		s.ack(msg)
		return
	}
	in := incoming{data: msg.Data(), header: h, inbox: h.Get(headerReply), msgID: id}
	s.arrived(msg.Subject(), &in)
	out := s.handle(s.ctx, in)
	if id != "" {
		s.seen.add(id)
	}
	s.ack(msg)
	if out != nil {
		s.respond(h.Get(headerReply), out)
	}
}

// ack waits for the server to confirm, so that an applied command is not
// delivered again unless the host dies in between.
func (s *Server) ack(msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		s.cfg.Log.Warn("command ack failed; it may be delivered again", "subject", msg.Subject(), "error", err)
	}
}

// idRing remembers the last n message ids applied.
type idRing struct {
	ids  []string
	set  map[string]struct{}
	next int
}

func newIDRing(n int) *idRing {
	return &idRing{ids: make([]string, n), set: make(map[string]struct{}, n)}
}

func (r *idRing) has(id string) bool { _, ok := r.set[id]; return ok }

func (r *idRing) add(id string) {
	if old := r.ids[r.next]; old != "" {
		delete(r.set, old)
	}
	r.ids[r.next] = id
	r.set[id] = struct{}{}
	r.next = (r.next + 1) % len(r.ids)
}
