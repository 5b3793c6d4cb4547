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
// published_at from the clock in milliseconds, payloads of about
// maxEnvelopeBytes at most, event ids from 1 and contiguous across envelopes, every
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
		mu    sync.Mutex
		envs  []kvevent.Envelope
		evs   []kvevent.Event
		sizes []int
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
		sizes = append(sizes, len(batch))
		mu.Unlock()
		if len(env.Payload) > maxEnvelopeBytes+256 {
			t.Errorf("payload of %d bytes", len(env.Payload))
		}
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
	const many = 3 * maxEnvelopeBytes / 80 // stored events of one block each, under 100 bytes
	p.Consume(append(stored(many), cache.Event{Kind: cache.Stored, Tier: tier.Host, Seq: 9, Local: 9}))
	p.Consume([]cache.Event{{Kind: cache.Removed, Tier: tier.Device, Seq: 1}, {Kind: cache.Removed, Tier: tier.Device, Seq: 2}})
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	total := many + 1
	waitUntil(t, "every event", func() bool { mu.Lock(); defer mu.Unlock(); return len(evs) == total })
	mu.Lock()
	defer mu.Unlock()
	if len(envs) < 4 || sizes[len(sizes)-1] != 1 {
		t.Fatalf("envelopes of %v events; want the first batch split in 3 or more, then the second batch alone", sizes)
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
