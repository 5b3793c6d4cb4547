package natscmd

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
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

// fuzzTenants are the tenants with committed pages in the tenant-subject
// fuzz target.
var fuzzTenants = []string{"", "a", "b"}

// FuzzHandleTenantSubject drives the handler in tenant-subject mode with
// what a NATS peer controls there: the subject (whose last token is the
// tenant), the payload and the Kvpilot-Tenant header, against a real
// executor over a real index holding pages of three tenants. For any
// input: no panic, a JSON answer with a registered error code, the index
// invariants hold, and no tenant but the one the subject acts for has any
// page or lease changed; a command claiming another tenant never
// succeeds.
func FuzzHandleTenantSubject(f *testing.F) {
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
		BroadcastSubject: "kv-control-broadcast", TenantSubjects: true})
	if err != nil {
		f.Fatal(err)
	}
	pages := map[string][]uint64{}
	for _, tenant := range fuzzTenants {
		toks := make([]uint32, 16)
		for i := range toks {
			toks[i] = uint32(i + 1)
		}
		h := blockid.Compute(toks, 4, blockid.Salt{Namespace: tenant})
		var res cache.CommitResult
		if err := ix.Commit(tenant, h, make([]uint64, len(h.Sequence)), &res); err != nil {
			f.Fatal(err)
		}
		pages[tenant] = h.Sequence
	}
	// state is one tenant's pages and leases, as far as a command can
	// change them.
	state := func(tenant string) string {
		var b strings.Builder
		g.Do(func(ix *cache.Index) {
			for _, q := range pages[tenant] {
				p, ok := ix.Lookup(tenant, q)
				fmt.Fprintf(&b, "|%v pin=%d tr=%v lease=%q prio=%d tiers=%v", ok, p.PinCount, p.Transient, p.Lease, p.Priority, p.Tiers)
			}
			for _, l := range ix.Leases() {
				if l.Tenant == tenant {
					fmt.Fprintf(&b, "|lease %s pages=%d", l.ID, l.Pages)
				}
			}
		})
		return b.String()
	}
	for _, seed := range fuzzTenantSubjectSeeds(pages["a"], pages["b"], pages[""]) {
		f.Add([]byte(seed.payload), seed.subject, seed.tenant)
	}
	f.Fuzz(func(t *testing.T, payload []byte, subject, tenant string) {
		h := nats.Header{}
		if tenant != "" {
			h.Set(headerTenant, tenant)
		}
		in := incoming{data: payload, header: h, inbox: "_INBOX.fuzz.1"}
		s.arrived(subject, &in)
		before := map[string]string{}
		for _, tn := range fuzzTenants {
			before[tn] = state(tn)
		}
		out := s.handle(context.Background(), in)
		for _, tn := range fuzzTenants {
			if (in.badSubject != nil || tn != in.subjectTenant) && state(tn) != before[tn] {
				t.Fatalf("a command on %q (acting for %q, bad %v) changed tenant %q:\n%s\n%s",
					subject, in.subjectTenant, in.badSubject, tn, before[tn], state(tn))
			}
		}
		if out == nil {
			return // a broadcast cache_control for another worker: ignored
		}
		var reply struct {
			Status string         `json:"status"`
			Code   errcode.Code   `json:"code"`
			Error  *errcode.Error `json:"error"`
		}
		if err := json.Unmarshal(out, &reply); err != nil {
			t.Fatalf("answer is not JSON: %v: %s", err, out)
		}
		switch reply.Status {
		case directive.StatusOK:
			if in.badSubject != nil {
				t.Fatalf("a command on %q, which names no usable tenant, succeeded: %s", subject, out)
			}
			if claimed := h.Get(headerTenant); claimed != "" && claimed != in.subjectTenant {
				t.Fatalf("a command on %q claiming tenant %q succeeded: %s", subject, claimed, out)
			}
			if t2, err := directive.DecodeTurn(payload, s.limits); err == nil && t2.Tenant != "" && t2.Tenant != in.subjectTenant {
				t.Fatalf("a turn on %q naming tenant %q succeeded: %s", subject, t2.Tenant, out)
			}
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
			t.Fatalf("index invariants after %q on %q: %v", payload, subject, err)
		}
	})
}

type tenantSubjectSeed struct {
	payload, subject, tenant string
}

func fuzzTenantSubjectSeeds(a, b, def []uint64) []tenantSubjectSeed {
	h := func(v uint64) string { return directive.Hash(v).String() }
	return []tenantSubjectSeed{
		{`{"type":"Cache","block_hashes":["` + h(a[1]) + `"],"pin":true}`, "kv-control-3.a", ""},
		{`{"type":"Cache","block_hashes":["` + h(b[1]) + `"],"pin":true}`, "kv-control-3.a", "b"},
		{`{"id":"t1","tenant":"b","directives":[{"type":"Cache","block_hashes":["` + h(b[0]) + `"],"pin":true}]}`, "kv-control-3.a", ""},
		{`{"id":"t2","tenant":"a","directives":[{"type":"Cache","block_hashes":["` + h(a[0]) + `"],"pin":true}]}`, "kv-control-3.a", "a"},
		{`{"type":"Cache","block_hashes":["` + h(def[0]) + `"],"pin":true}`, "kv-control-3", ""},
		{`{"type":"Cache","block_hashes":["` + h(a[0]) + `"],"pin":true}`, "kv-control-3", "a"},
		{`{"type":"Pause","block_hashes":["` + h(a[2]) + `"],"ttl_seconds":30,"lease_id":"l1"}`, "kv-control-broadcast.a", ""},
		{`{"type":"RevokeLease","lease_id":"l1"}`, "kv-control-3.b", ""},
		{`{"type":"Prune","after_block_hash":"` + h(b[0]) + `"}`, "kv-control-3.b", ""},
		{`{"action":"pin_blocks","block_hashes":["` + h(a[0]) + `"],"ttl_seconds":30,"worker_id":3}`, "kv-control-broadcast.a", "b"},
		{`{"action":"unpin_prefix","token_ids":[1,2,3,4,5,6,7,8],"worker_id":3}`, "kv-control-3.a", ""},
		{`{"action":"evict_descendants","block_hashes":["` + h(b[0]) + `"],"worker_id":9}`, "kv-control-broadcast.b", ""},
		{`{"action":"pin_prefix","token_ids":[1,2,3,4]}`, "kv-control-3.*", ""},
		{`{"type":"Cache","block_hashes":["` + h(a[1]) + `"],"pin":true}`, "kv-control-3.a.b", ""},
		{`{"type":"Cache","block_hashes":["` + h(a[1]) + `"],"pin":true}`, "other.a", ""},
		{`not json`, "kv-control-3.\xff", "\x00"},
	}
}
