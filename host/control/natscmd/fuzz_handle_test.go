package natscmd

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// FuzzHandle drives the command handler end to end with what a NATS peer
// controls (the payload, the tenant and source headers, broadcast or not)
// against a real executor over a real index with committed pages. For any
// input: no panic, an answer that is JSON with status ok or error, every
// error carries a registered code, and the index keeps its invariants.
func FuzzHandle(f *testing.F) {
	ix, err := cache.New(cache.Config{PageSize: 4, Clock: cache.NewManualClock(0), TenantPinQuota: 8,
		Tiers: [tier.Count]cache.TierConfig{
			tier.Device: {Capacity: 64, High: 0.9, Low: 0.8, PinFraction: 0.5},
			tier.Host:   {Capacity: 64, High: 0.9, Low: 0.8, PinFraction: 0.5},
		}})
	if err != nil {
		f.Fatal(err)
	}
	g := guarded.New(ix)
	ex, err := executor.New(executor.Config{Index: g, WorkerID: "3", PauseTier: tier.Host})
	if err != nil {
		f.Fatal(err)
	}
	n, err := natsembed.Start(natsembed.Options{DataDir: filepath.Join(f.TempDir(), "nats")})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = n.Close() })
	s, err := New(Config{Conn: n.Conn(), Ingress: ingressOf(f, ex, nil, 1e9), WorkerID: 3, WorkerSubject: "kv-control-3",
		BroadcastSubject: "kv-control-broadcast"})
	if err != nil {
		f.Fatal(err)
	}
	// Pages of two tenants the fuzzed commands can name: the seeds use
	// their hashes, so mutations start from commands that apply.
	commit := func(tenant string, base uint32) []uint64 {
		toks := make([]uint32, 16)
		for i := range toks {
			toks[i] = base + uint32(i)
		}
		h := blockid.Compute(toks, 4, blockid.Salt{Namespace: tenant})
		var res cache.CommitResult
		if err := ix.Commit(tenant, h, make([]uint64, len(h.Sequence)), &res); err != nil {
			f.Fatal(err)
		}
		return h.Sequence
	}
	a, b := commit("a", 1), commit("b", 1)
	for _, seed := range fuzzHandleSeeds(a, b) {
		f.Add([]byte(seed.payload), seed.tenant, seed.source, seed.broadcast)
	}
	f.Fuzz(func(t *testing.T, payload []byte, tenant, source string, broadcast bool) {
		h := nats.Header{}
		if tenant != "" {
			h.Set(headerTenant, tenant)
		}
		if source != "" {
			h.Set(headerSource, source)
		}
		out := s.handle(context.Background(), incoming{data: payload, header: h, inbox: "_INBOX.fuzz.1", broadcast: broadcast})
		if out == nil {
			return // a broadcast cache_control for another worker: ignored
		}
		var reply struct {
			Status string          `json:"status"`
			Code   errcode.Code    `json:"code"`
			Error  *errcode.Error  `json:"error"`
			Rest   json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(out, &reply); err != nil {
			t.Fatalf("answer is not JSON: %v: %s", err, out)
		}
		switch reply.Status {
		case directive.StatusOK:
		case directive.StatusError:
			code := reply.Code
			if reply.Error != nil {
				code = reply.Error.Code
			}
			if _, ok := errcode.Lookup(code); !ok {
				t.Fatalf("error answer with unregistered code %q: %s", code, out)
			}
		default:
			t.Fatalf("answer status %q: %s", reply.Status, out)
		}
		var err error
		g.Do(func(ix *cache.Index) { err = ix.Check() })
		if err != nil {
			t.Fatalf("index invariants after %q: %v", payload, err)
		}
	})
}

type handleSeed struct {
	payload, tenant, source string
	broadcast               bool
}

func fuzzHandleSeeds(a, b []uint64) []handleSeed {
	h := func(v uint64) string { return directive.Hash(v).String() }
	return []handleSeed{
		{`{"type":"Cache","block_hashes":["` + h(a[1]) + `"],"pin":true}`, "a", "router", false},
		{`{"type":"Cache","block_hashes":["` + h(b[1]) + `"],"pin":true}`, "a", "", false},
		{`[{"type":"Think","block_hashes":["` + h(a[3]) + `"],"transient":true},{"type":"Think","block_hashes":["` + h(a[3]) + `"],"transient":false}]`, "a", "", false},
		{`{"type":"Pause","block_hashes":["` + h(a[2]) + `"],"ttl_seconds":30,"lease_id":"l1"}`, "a", "", false},
		{`{"type":"RenewLease","lease_id":"l1","new_ttl_seconds":60}`, "b", "", false},
		{`{"type":"RevokeLease","lease_id":"l1"}`, "a", "", false},
		{`{"type":"Prune","after_block_hash":"` + h(b[0]) + `"}`, "b", "", false},
		{`{"type":"Warm","block_keys":["` + h(a[0]) + `"],"target_tier":"device"}`, "a", "", false},
		{`{"id":"t1","source":"r","tenant":"b","directives":[{"type":"Cache","block_hashes":["` + h(b[3]) + `"],"pin":true,"ttl":"5m"}]}`, "", "", false},
		{`{"action":"pin_blocks","block_hashes":["` + h(a[0]) + `"],"ttl_seconds":30,"worker_id":3}`, "a", "", false},
		{`{"action":"unpin_prefix","token_ids":[1,2,3,4,5,6,7,8],"worker_id":3}`, "a", "", true},
		{`{"action":"evict_descendants","block_hashes":["` + h(b[0]) + `"],"worker_id":9}`, "b", "", true},
		{`{"action":"pin_prefix","token_ids":[1,2,3,4],"ttl_seconds":-1}`, "", "", false},
		{`{"type":"Splice","session":"s","start":4,"end":8,"replacement":"x"}`, "a", "", false},
		{`not json`, "", "", false},
		{`{"type":"Cache","block_hashes":[18446744073709551615],"pin":true}`, "", "\x00bad", false},
	}
}
