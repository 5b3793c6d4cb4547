package natscmd

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// retireStream is what a host without JetStream commands does about a
// command stream an earlier run (with nats.jetstream_commands) left over
// its subjects. Left alone, the stream would keep storing the commands the
// host now applies directly, acknowledge them to a plain request ahead of
// the host's answer (a client would read "stored" for a command the host
// applied, or refused), and hand them to this worker's consumer again when
// the setting is turned back on: applied twice.
//
// So it deletes this worker's consumer and takes this worker's subjects out
// of the stream; when nothing else is left in it (no other worker's
// subjects, no other consumer) it deletes the stream. It says what it did
// in the log. A failure is logged and the host still starts: the state file
// then keeps the next JetStream run from replaying what the stream holds.
func (s *Server) retireStream(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	log := s.cfg.Log.With("stream", s.cfg.Stream)
	js, err := jetstream.New(s.cfg.Conn)
	if err != nil {
		return
	}
	stream, err := js.Stream(ctx, s.cfg.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return
	case err != nil:
		log.Warn("could not look for a command stream left by a run with nats.jetstream_commands", "error", err)
		return
	}
	info := stream.CachedInfo()
	mine := s.subjects()
	if !slices.ContainsFunc(info.Config.Subjects, func(sub string) bool { return slices.Contains(mine, sub) }) {
		return
	}
	if err := stream.DeleteConsumer(ctx, s.cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		log.Warn("could not delete this worker's consumer on the command stream left by a run with nats.jetstream_commands", "consumer", s.cfg.Durable, "error", err)
	}
	others := false
	for name := range stream.ConsumerNames(ctx).Name() {
		if name != s.cfg.Durable {
			others = true
		}
	}
	broadcast := s.broadcastSubjects()
	var keep []string
	for _, sub := range info.Config.Subjects {
		if slices.Contains(mine, sub) && !(others && slices.Contains(broadcast, sub)) {
			continue // this worker's; the broadcast subjects too when no one else consumes them
		}
		keep = append(keep, sub)
	}
	if len(keep) == 0 {
		if err := js.DeleteStream(ctx, s.cfg.Stream); err != nil {
			log.Error("nats.jetstream_commands is off but a command stream left by an earlier run still takes this worker's commands; "+
				"it could not be deleted: a plain request may get the stream's acknowledgement instead of the host's answer", "error", err)
			return
		}
		log.Warn("nats.jetstream_commands is off: deleted the command stream an earlier run left, so it neither answers commands "+
			"in the host's place nor replays them later", "messages", info.State.Msgs)
		return
	}
	cfg := info.Config
	cfg.Subjects = keep
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		log.Error("nats.jetstream_commands is off but the command stream shared with other workers still takes this worker's commands; "+
			"its subjects could not be updated", "error", err)
		return
	}
	log.Warn("nats.jetstream_commands is off: took this worker's subjects out of the command stream other workers share, "+
		"and deleted this worker's consumer", "subjects_left", keep)
}

// broadcastSubjects are the broadcast subject and, with tenant subjects,
// its wildcard.
func (s *Server) broadcastSubjects() []string {
	subs := []string{s.cfg.BroadcastSubject}
	if s.cfg.TenantSubjects {
		subs = append(subs, TenantSubject(s.cfg.BroadcastSubject, "*"))
	}
	return subs
}
