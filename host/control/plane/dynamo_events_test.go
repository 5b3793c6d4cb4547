package plane

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/control/publish"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
)

// With events in Dynamo's format on the endpoint's subject, a NATS watcher
// (kvpilot ctl watch) reads the envelopes and sees the same events, in
// order, as a Control-socket watcher, with event ids from 1.
func TestDynamoFormatWatchedOverNATS(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.EventsFormat = publish.FormatDynamo
		c.EventsSubject = events.DynamoSubject("dynamo", "backend", "generate")
	})
	overNATS, _ := watch(t, e.nc, controlclient.WatchOptions{})
	overSocket, _ := watch(t, e.uds, controlclient.WatchOptions{})
	h := e.commit("", toks(0, 3*pageSize))
	waitFor(t, "both watchers to see the store", func() bool {
		return len(overNATS.events()) > 0 && len(overSocket.events()) > 0
	})
	a, b := overNATS.events()[0], overSocket.events()[0]
	if a.Event.EventID != 1 || a.WorkerID != 42 || a.Event.Data.Stored == nil {
		t.Fatalf("over NATS: %+v", a)
	}
	if a.Event.EventID != b.Event.EventID || len(a.Event.Data.Stored.Blocks) != len(b.Event.Data.Stored.Blocks) {
		t.Fatalf("NATS and socket watchers differ:\n%+v\n%+v", a, b)
	}
	for i, blk := range a.Event.Data.Stored.Blocks {
		if blk.BlockHash != h.Sequence[i] || blk.TokensHash != h.Local[i] {
			t.Fatalf("block %d: %+v, want seq %d local %d", i, blk, h.Sequence[i], h.Local[i])
		}
	}
}
