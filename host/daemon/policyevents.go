package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// policyEventBuffer is how many KV events may wait for the policy runtime.
// Offering to the runtime never blocks, so the buffer only absorbs
// scheduling delays.
const policyEventBuffer = 1 << 16

// feedKVEvents offers every published KV event to the policies, as the
// publisher's hub delivers them (the hub, not the index queue, so event
// order and numbering match what routers see). A watcher that falls behind
// is ended by the hub; the loss is logged and the feed resubscribes.
func (d *Daemon) feedKVEvents(ctx context.Context, wg *sync.WaitGroup) {
	if d.control == nil {
		return
	}
	hub := d.control.Hub()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			w := hub.Subscribe(policyEventBuffer, nil)
			d.drainToPolicies(ctx, w.Events())
			err := w.Err()
			w.Close()
			if err != nil && ctx.Err() == nil {
				d.log.Warn("policies fell behind the KV event stream; events were skipped", "error", err)
			}
		}
	}()
}

func (d *Daemon) drainToPolicies(ctx context.Context, evs <-chan events.RouterEvent) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-evs:
			if !ok {
				return
			}
			if obs, ok := kvObservation(ev); ok {
				d.observe(obs)
			}
		}
	}
}

// kvObservation turns a published RouterEvent into a policy observation.
func kvObservation(ev events.RouterEvent) (policy.Observation, bool) {
	t, err := tier.Parse(ev.StorageTier)
	if err != nil {
		return policy.Observation{}, false
	}
	kv := &policy.KVEvent{Tier: t.String()}
	switch d := ev.Event.Data; {
	case d.Stored != nil:
		kv.Type = policy.KVStored
		if d.Stored.ParentHash != nil {
			kv.Parent, kv.HasParent = *d.Stored.ParentHash, true
		}
		for _, b := range d.Stored.Blocks {
			kv.BlockHashes = append(kv.BlockHashes, b.BlockHash)
		}
	case d.Removed != nil:
		kv.Type = policy.KVRemoved
		kv.BlockHashes = append(kv.BlockHashes, d.Removed.BlockHashes...)
	default:
		kv.Type = policy.KVCleared
	}
	return policy.Observation{Time: time.Now(), Kind: policy.KindKVEvent, Tenant: ev.Tenant, KV: kv}, true
}
