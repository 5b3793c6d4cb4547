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
			AckWait:       ackWait,
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
	if err := s.state.save(s.resumeFrom(info, cons.CachedInfo().AckFloor.Stream, prev, had)); err != nil {
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

// ackWait is how long the consumer waits for a command's ack before it
// delivers the command again (also when a delivery was lost on its way).
const ackWait = 30 * time.Second

// resumeFrom is the state this run starts from. After a run that took
// commands without JetStream, everything the stream holds now is counted
// as held before (that run applied, or refused, those commands directly).
// The commands applied with their ack failed are kept while the stream is
// the same and the consumer's ack floor is below them.
func (s *Server) resumeFrom(info *jetstream.StreamInfo, ackFloor uint64, prev commandState, had bool) commandState {
	st := commandState{JetStream: true, Stream: info.Config.Name, Created: info.Created.UTC().Format(time.RFC3339Nano)}
	same := had && prev.Stream == st.Stream && prev.Created == st.Created
	switch {
	case had && !prev.JetStream:
		st.HeldBefore = info.State.LastSeq
		if st.HeldBefore > 0 {
			s.cfg.Log.Warn("the last run took commands without nats.jetstream_commands and applied them directly; "+
				"the commands the stream already holds are not replayed", "stream", st.Stream, "through_seq", st.HeldBefore)
		}
	case same:
		st.HeldBefore = prev.HeldBefore
		st.Unsure = slices.Clone(prev.Unsure)
		st.forget(0, ackFloor)
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

// onJetStream acknowledges a command, then applies it: once acknowledged
// it is never delivered again, so it is applied at most once. When the
// acknowledgement fails (it may or may not have reached the server), the
// command is recorded as unsure before it is applied; delivered again, it
// is acknowledged and not applied. A host killed between a good ack and
// the application loses that one command.
func (s *Server) onJetStream(msg jetstream.Msg) {
	h := msg.Headers()
	meta, merr := msg.Metadata()
	if merr == nil {
		seq := meta.Sequence.Stream
		st := s.state.cur
		switch {
		case seq <= st.HeldBefore:
			s.cfg.Log.Debug("command held before this run, applied directly by the last one; not applied", "seq", seq)
			s.ack(msg)
			return
		case st.unsure(seq):
			s.cfg.Log.Info("command delivered again after its ack failed; not applied again", "subject", msg.Subject(), "seq", seq)
			if s.ack(msg) == nil {
				st.Unsure = slices.Clone(st.Unsure)
				st.forget(seq, 0)
				s.saveState(st)
			}
			return
		}
		if s.ack(msg) != nil {
			st.Unsure = append(slices.Clone(st.Unsure), seq)
			s.saveState(st)
		}
	} else if s.ack(msg) != nil {
		s.cfg.Log.Warn("command without JetStream metadata, and its ack failed: if it is delivered again it is applied again", "subject", msg.Subject(), "error", merr)
	}
	in := incoming{data: msg.Data(), header: h, inbox: h.Get(headerReply), msgID: h.Get(headerMsgID)}
	s.arrived(msg.Subject(), &in)
	if out := s.handle(s.ctx, in); out != nil {
		s.respond(h.Get(headerReply), out)
	}
}

func (s *Server) saveState(st commandState) {
	if err := s.state.save(st); err != nil {
		s.cfg.Log.Error("command plane state not saved; after a restart a command whose ack failed may be applied again", "error", err)
	}
}

// ack waits for the server to confirm the acknowledgement.
func (s *Server) ack(msg jetstream.Msg) error {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	err := msg.DoubleAck(ctx)
	if err != nil {
		s.cfg.Log.Warn("command ack failed; if it is delivered again, it is recognised", "subject", msg.Subject(), "error", err)
	}
	return err
}
