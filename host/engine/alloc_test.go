package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// turn runs one request without touching the page bytes; it is safe to call
// from several goroutines.
func turn(ctx context.Context, c *engineclient.Client, session string, toks []uint32, cacheControl string) (int, error) {
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: session, Tokens: toks})
	if err != nil {
		return 0, fmt.Errorf("match: %w", err)
	}
	ps := c.Registration().PageSize
	slots := append([]uint32(nil), m.PageSlots...)
	if need := len(toks)/ps - len(slots); need > 0 {
		got, err := c.Allocate(ctx, m.RequestID, need)
		if err != nil {
			_, _ = c.Release(ctx, m.RequestID)
			return 0, fmt.Errorf("allocate %d pages: %w", need, err)
		}
		slots = append(slots, got...)
	}
	if _, err := c.Commit(ctx, m.RequestID, toks, slots); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	if _, err := c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID, CacheControlJSON: cacheControl}); err != nil {
		return 0, fmt.Errorf("finish: %w", err)
	}
	return m.CachedTokens, nil
}

// A device pool exactly the index's device capacity serves an eviction
// flood: the slots running requests hold count as used in the index, so
// its eviction makes room for them, and Allocate waits for drops landing
// under other requests' steps instead of failing. A pinned session keeps
// its pages through the flood (the pin budget leaves room for the rest).
func TestAllocateEvictsForAFullPool(t *testing.T) {
	h := startHost(t, enginetest.Options{PageSize: 16, DevicePages: 32, DeviceHeadroom: -1, HostPages: 1024})
	c := dial(t, h.Socket, gqa(16))
	if capSlots := c.Device().Slots; capSlots != 32 {
		t.Fatalf("device arena has %d slots, want exactly the index capacity 32", capSlots)
	}
	ctx := ctxT(t)
	vip := seq(1, 16*6)
	if _, err := turn(ctx, c, "vip", vip, `{"cache_control":{"type":"ephemeral","ttl":"1h"}}`); err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 3, 12
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				s := fmt.Sprintf("flood-%d-%d", w, i)
				prompt := seq(100000*(w+1)+1000*i, 16*6+5)
				for k := 0; k < 2; k++ { // the second turn reuses and extends
					if _, err := turn(ctx, c, s, append(prompt, seq(7, 16*k)...), ""); err != nil {
						errs <- fmt.Errorf("%s turn %d: %w", s, k, err)
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		t.Fatal(err)
	}
	if got, err := turn(ctx, c, "vip", vip, ""); err != nil || got != len(vip) {
		t.Fatalf("pinned session after the flood: cached %d of %d, %v", got, len(vip), err)
	}
	st := h.IndexStats().Tiers[tier.Device]
	if st.Reserved != 0 || st.Pages > 32 {
		t.Fatalf("device tier after the flood: %+v (reservations must all be released)", st)
	}
}

// An engine that serves no fill orders gets its fills refused after a
// short wait, so a splice (or a Match running session diff) does not hang
// until its caller's deadline.
func TestFillWithoutAStreamFails(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	dial(t, h.Socket, gqa(16))
	start := time.Now()
	_, err := h.Service.Fill(ctxT(t), enginetestFill("s", 32, []uint32{5}, []uint32{3}))
	if e, ok := errcode.As(err); !ok || e.Code != errcode.Unavailable || time.Since(start) > 10*time.Second {
		t.Fatalf("fill with no stream: %v after %v", err, time.Since(start))
	}
}
