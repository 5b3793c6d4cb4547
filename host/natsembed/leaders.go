package natsembed

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A clustered stream answers nothing useful for a few seconds while it
// elects a leader: right after an R3 stream or bucket is created, after a
// node is lost, during a rolling restart. A request then gets "no
// responders" (nobody serves the stream's subjects yet), "JetStream system
// temporarily unavailable", or stalls until its deadline (it was routed to
// the lost leader). Whoever writes to a cluster must try again then, within
// bounds; RetryBetweenLeaders does.

// jsClusterNotAvailable is the server's JSClusterNotAvailErr: "JetStream
// system temporarily unavailable".
const jsClusterNotAvailable jetstream.ErrorCode = 10008

// BetweenLeaders reports whether err is what JetStream answers while a
// stream or the cluster's meta group elects a leader.
func BetweenLeaders(err error) bool {
	var api *jetstream.APIError
	switch {
	case err == nil:
		return false
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &api):
		return api.ErrorCode == jsClusterNotAvailable
	}
	return false
}

// RetryBetweenLeaders runs op, each try bounded by attempt, and tries
// again, backing off from 50 ms to 1 s, while a try stalled past its
// bound or failed as BetweenLeaders says, for at most patience in all.
// Any other error, success and the end of ctx end it. op must be safe to
// repeat: a try that timed out may have taken effect.
func RetryBetweenLeaders(ctx context.Context, attempt, patience time.Duration, op func(context.Context) error) error {
	give := time.Now().Add(patience)
	wait := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := op(actx)
		stalled := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil || !(stalled || BetweenLeaders(err)) || ctx.Err() != nil || time.Now().After(give) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
