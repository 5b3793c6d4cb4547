package natscmd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/natsembed"
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
func (s *Server) startJetStream(ctx context.Context, prev commandState, had bool) error {
	js, err := jetstream.New(s.cfg.Conn)
	if err != nil {
		return fmt.Errorf("natscmd: jetstream: %w", err)
	}
	// A stream at three replicas created just now may still be electing
	// its leader: its consumer cannot be made until it has one.
	var (
		stream jetstream.Stream
		cons   jetstream.Consumer
		info   *jetstream.StreamInfo
	)
	err = natsembed.RetryBetweenLeaders(ctx, 5*time.Second, time.Minute, func(ctx context.Context) error {
		var err error
		if stream, err = s.ensureStream(ctx, js); err != nil {
			return err
		}
		if info, err = stream.Info(ctx); err != nil {
			return fmt.Errorf("natscmd: command stream %s: %w", s.cfg.Stream, err)
		}
		cons, err = stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
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
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.state.save(s.resumeFrom(info, prev, had)); err != nil {
		return err
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

// resumeFrom is the state this run starts from: the last run's mark in
// the same stream, or, after a run that took commands without JetStream,
// everything the stream holds now counted as taken (that run applied, or
// refused, those commands directly).
func (s *Server) resumeFrom(info *jetstream.StreamInfo, prev commandState, had bool) commandState {
	st := commandState{JetStream: true, Stream: info.Config.Name, Created: info.Created.UTC().Format(time.RFC3339Nano)}
	switch {
	case had && !prev.JetStream:
		st.Taken = info.State.LastSeq
		if st.Taken > 0 {
			s.cfg.Log.Warn("the last run took commands without nats.jetstream_commands and applied them directly; "+
				"the commands the stream already holds are not replayed", "stream", st.Stream, "through_seq", st.Taken)
		}
	case had && prev.Stream == st.Stream && prev.Created == st.Created:
		st.Taken = prev.Taken
	}
	return st
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
	if meta, err := msg.Metadata(); err == nil {
		seq := meta.Sequence.Stream
		if seq <= s.state.cur.Taken {
			// Taken before: its ack was lost, or the host stopped before
			// it; or the last run took it without JetStream.
			s.cfg.Log.Debug("command taken before; not applied again", "subject", msg.Subject(), "seq", seq)
			s.ack(msg)
			return
		}
		st := s.state.cur
		st.Taken = seq
		if err := s.state.save(st); err != nil {
			s.cfg.Log.Error("command plane state not saved; a restart may apply this command again", "seq", seq, "error", err)
		}
	}
	in := incoming{data: msg.Data(), header: h, inbox: h.Get(headerReply), msgID: h.Get(headerMsgID)}
	s.arrived(msg.Subject(), &in)
	out := s.handle(s.ctx, in)
	s.ack(msg)
	if out != nil {
		s.respond(h.Get(headerReply), out)
	}
}

// ack waits for the server to confirm, so that an applied command is not
// delivered again unless the host dies in between (and then the state's
// mark keeps it from being applied twice).
func (s *Server) ack(msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		s.cfg.Log.Warn("command ack failed; it may be delivered again, and is then recognised", "subject", msg.Subject(), "error", err)
	}
}
