package publish

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/kvevent"
)

// In Dynamo's format each batch goes out as envelopes on the endpoint's
// subject: one publisher_id, sequence counting messages from 0,
// published_at from the clock in milliseconds, at most maxEnvelopeEvents
// events each, event ids from 1 and contiguous across envelopes, every
// event stamped with worker_id and dp_rank; silenced tiers are left out
// without a gap in the ids.
func TestDynamoFormatEnvelopes(t *testing.T) {
	n, err := natsembed.Start(natsembed.Options{DataDir: filepath.Join(t.TempDir(), "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	subject := events.DynamoSubject("ns", "backend", "generate")
	var (
		mu   sync.Mutex
		envs []kvevent.Envelope
		evs  []kvevent.Event
	)
	sub, err := n.Conn().Subscribe(subject, func(m *nats.Msg) {
		env, err := kvevent.DecodeEnvelope(m.Data)
		if err != nil {
			t.Error(err)
			return
		}
		batch, err := kvevent.DecodeBatch(env.Payload)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		envs = append(envs, env)
		evs = append(evs, batch...)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	now := time.UnixMilli(1_795_000_000_123)
	p, err := New(Config{Conn: n.Conn(), Subject: subject, Format: FormatDynamo, WorkerID: 0x9d74316bd2523, DPRank: 3,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	p.Silence(tier.Host, true)
	p.Consume(append(stored(2*maxEnvelopeEvents+5), cache.Event{Kind: cache.Stored, Tier: tier.Host, Seq: 9, Local: 9}))
	p.Consume([]cache.Event{{Kind: cache.Removed, Tier: tier.Device, Seq: 1}, {Kind: cache.Removed, Tier: tier.Device, Seq: 2}})
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	total := 2*maxEnvelopeEvents + 5 + 1
	waitUntil(t, "every event", func() bool { mu.Lock(); defer mu.Unlock(); return len(evs) == total })
	mu.Lock()
	defer mu.Unlock()
	if len(envs) != 4 {
		t.Fatalf("%d envelopes, want 4 (3 for the first batch, 1 for the second)", len(envs))
	}
	for i, env := range envs {
		if env.PublisherID != envs[0].PublisherID || env.PublisherID == 0 || env.Sequence != uint64(i) ||
			env.PublishedAt != 1_795_000_000_123 || env.Topic != "kv-events" {
			t.Fatalf("envelope %d: %+v", i, env)
		}
	}
	for i, ev := range evs {
		if ev.Event.EventID != uint64(i+1) || ev.WorkerID != 0x9d74316bd2523 || ev.Event.DPRank != 3 || ev.StorageTier != "device" {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	last := evs[total-1]
	if last.Event.Data.Removed == nil || len(last.Event.Data.Removed.BlockHashes) != 2 {
		t.Fatalf("last event: %+v", last.Event.Data)
	}
	if p.Published() != uint64(total) || p.Failed() != 0 {
		t.Fatalf("published %d failed %d, want %d and 0", p.Published(), p.Failed(), total)
	}
}

func TestUnknownFormatRefused(t *testing.T) {
	if _, err := New(Config{Format: "protobuf"}); err == nil {
		t.Fatal("an unknown format was accepted")
	}
}
