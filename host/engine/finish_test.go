package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// finishWith runs a turn that commits 3 full pages and finishes with fr.
func finishWith(t *testing.T, c *engineclient.Client, tenant string, toks []uint32, fr engineclient.FinishRequest) engineclient.FinishResult {
	t.Helper()
	ctx := ctxT(t)
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: "s-" + tenant, Tenant: tenant, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	slots, err := c.Allocate(ctx, m.RequestID, len(toks)/16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(ctx, m.RequestID, toks, slots); err != nil {
		t.Fatal(err)
	}
	fr.RequestID = m.RequestID
	res, err := c.Finish(ctx, fr)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestFinishCacheControlPins(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	c := dial(t, h.Socket, gqa(16))
	cases := []struct {
		name string
		fr   engineclient.FinishRequest
		ttl  time.Duration
	}{
		{"anthropic", engineclient.FinishRequest{CacheControlJSON: `{"model":"m","cache_control":{"type":"ephemeral","ttl":"5m"}}`}, 5 * time.Minute},
		{"nvext", engineclient.FinishRequest{CacheControlJSON: `{"nvext":{"cache_control":{"type":"ephemeral","ttl":3600}}}`}, time.Hour},
		{"message", engineclient.FinishRequest{CacheControl: &enginewire.CacheControl{Type: "ephemeral", TTL: 30 * time.Second}}, 30 * time.Second},
		{"default-ttl", engineclient.FinishRequest{CacheControlJSON: `{"type":"ephemeral"}`}, 300 * time.Second},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			toks := seq(1000*(i+1), 48+5)
			res := finishWith(t, c, tc.name, toks, tc.fr)
			if !res.Pinned || res.PinnedBlocks != 3 || res.TotalBlocks != 3 || res.PinError != nil {
				t.Fatalf("finish: %+v", res)
			}
			hs := blockid.Compute(toks, 16, blockid.Salt{Namespace: tc.name})
			for _, s := range hs.Sequence {
				info, ok := h.Page(tc.name, s)
				if !ok || info.PinCount != 1 || info.PinTTL != tc.ttl || info.LockRef != 0 {
					t.Fatalf("page %x: %+v %v", s, info, ok)
				}
			}
		})
	}
	// Every pin went through the executor and is in the audit log.
	pins := 0
	for _, r := range h.Audit.Records() {
		if r.Verb == "pin_prefix" && strings.HasPrefix(r.Source, "engine:") && r.Status == "ok" {
			pins++
		}
	}
	if pins != len(cases) {
		t.Fatalf("%d audited pins, want %d: %+v", pins, len(cases), h.Audit.Records())
	}
	// Without cache_control nothing is pinned.
	res := finishWith(t, c, "plain", seq(50000, 48), engineclient.FinishRequest{})
	if res.Pinned {
		t.Fatal("pinned without cache_control")
	}
}

func TestFinishPinOverBudgetReportsButFinishes(t *testing.T) {
	h := startHost(t, enginetest.Options{PinFraction: 0.02}) // 1 page of 64
	c := dial(t, h.Socket, gqa(16))
	res := finishWith(t, c, "t", seq(7, 48), engineclient.FinishRequest{CacheControlJSON: `{"cache_control":{"type":"ephemeral","ttl":"5m"}}`})
	if res.Pinned || res.PinError == nil || res.PinError.Code != errcode.PinBudgetExhausted {
		t.Fatalf("finish over budget: %+v", res)
	}
	if res.FreedSlots != 0 || h.Service.Stats().Running != 0 {
		t.Fatalf("request not finished: %+v", res)
	}
}

// Fill orders reach the engine's stream and its completion reaches the
// caller; a failed fill is reported as such.
func TestFillOrders(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	c := dial(t, h.Socket, gqa(16))
	ctx, cancel := context.WithCancel(ctxT(t))
	got := make(chan engineclient.FillOrder, 2)
	done := make(chan error, 1)
	go func() {
		done <- c.ServeFillOrders(ctx, func(_ context.Context, o engineclient.FillOrder) error {
			got <- o
			if o.Position == 99 {
				return errcode.New(errcode.Unavailable, "no room")
			}
			return nil
		})
	}()
	order := enginetestFill("s", 32, []uint32{5, 6, 7}, []uint32{3})
	if _, err := h.Service.Fill(ctxT(t), order); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.Session != "s" || o.Position != 32 || len(o.Tokens) != 3 || o.PageSlots[0] != 3 {
		t.Fatalf("order received: %+v", o)
	}
	order.Position = 99
	if _, err := h.Service.Fill(ctxT(t), order); err == nil || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("failed fill: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Finish pins the request's prefix through the ingress without holding the
// request: while the pin waits (here for the index lock, which the test
// holds), the same request's other calls are answered at once (it is
// ending) instead of queueing behind it, and once the lock is free the pin
// lands and the request ends.
func TestFinishDoesNotHoldTheRequestAcrossItsPin(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	c := dial(t, h.Socket, gqa(16))
	ctx := ctxT(t)
	toks := seq(11, 48)
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: "s", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	slots, err := c.Allocate(ctx, m.RequestID, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(ctx, m.RequestID, toks, slots); err != nil {
		t.Fatal(err)
	}
	reg, _ := h.Service.Registration()

	locked, unlock := make(chan struct{}), make(chan struct{})
	go h.Index.Do(func(*cache.Index) { close(locked); <-unlock })
	<-locked
	finished := make(chan error, 1)
	go func() {
		f, err := h.Service.Finish(ctx, engine.FinishArgs{RegistrationID: reg.ID, RequestID: m.RequestID,
			CacheControl: enginewire.CacheControl{Type: "ephemeral", TTL: 5 * time.Minute}})
		if err == nil && !f.Pinned {
			err = fmt.Errorf("finish: %+v", f)
		}
		finished <- err
	}()
	// Allocate of 0 pages is refused before it reaches the index: as a bad
	// request while the request is open, as ended once Finish took it.
	for {
		_, err := h.Service.Allocate(ctx, reg.ID, m.RequestID, 0)
		if e, ok := errcode.As(err); ok && e.Code == errcode.UnknownRequest {
			break
		}
		select {
		case err := <-finished:
			t.Fatalf("Finish returned while the test held the index lock: %v", err)
		case <-ctx.Done():
			t.Fatal("the request was not answered while its Finish waited for the index lock")
		case <-time.After(time.Millisecond):
		}
	}
	close(unlock)
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if p, ok := h.Page("", blockid.Compute(toks, 16, blockid.Salt{}).Sequence[2]); !ok || p.PinCount != 1 || p.LockRef != 0 {
		t.Fatalf("the prefix after Finish: %+v (found %v), want pinned and unlocked", p, ok)
	}
}
