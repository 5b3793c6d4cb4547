package natscmd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// memAudit keeps audit records for a test to read.
type memAudit struct {
	mu   sync.Mutex
	recs []executor.Record
}

func (a *memAudit) Append(recs []executor.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, recs...)
	return nil
}

func (a *memAudit) find(match func(executor.Record) bool) (executor.Record, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.recs {
		if match(r) {
			return r, true
		}
	}
	return executor.Record{}, false
}

// tenantEnv is a host with tenant subjects on, behind a nats-server whose
// users are the host (all permissions), alice and bob. Each tenant may
// publish commands on its own subject of worker 7 only, and receive
// replies on _INBOX.>.
type tenantEnv struct {
	t     *testing.T
	g     *guarded.Index // ix with the lock the executor takes
	ix    *cache.Index
	audit *memAudit
	url   string
	host  *nats.Conn
	cmds  *Server
	pages map[string][]uint64 // each tenant's two committed pages
}

func newTenantEnv(t *testing.T, jet bool) *tenantEnv {
	e := &tenantEnv{t: t, audit: &memAudit{}, pages: map[string][]uint64{}}
	tenant := func(name string) *server.User {
		return &server.User{Username: name, Password: name + "-pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"kv-control-7." + name}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}}
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{{Username: "host", Password: "host-pw"}, tenant("alice"), tenant("bob")},
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(srv.Shutdown)
	e.url = srv.ClientURL()
	e.ix, err = cache.New(cache.Config{PageSize: 4, Clock: cache.NewMonotonicClock(),
		Tiers: [tier.Count]cache.TierConfig{tier.Device: {Capacity: 64, High: 0.9, Low: 0.8, PinFraction: 0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	e.g = guarded.New(e.ix)
	ex, err := executor.New(executor.Config{Index: e.g, WorkerID: "7", Audit: e.audit})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "alice", "bob"} {
		// The same tokens for every tenant: only the namespace salt
		// tells their pages apart.
		h := blockid.Compute([]uint32{1, 2, 3, 4, 5, 6, 7, 8}, 4, blockid.Salt{Namespace: name})
		var res cache.CommitResult
		if err := e.ix.Commit(name, h, make([]uint64, len(h.Sequence)), &res); err != nil {
			t.Fatal(err)
		}
		e.pages[name] = h.Sequence
	}
	e.host = e.connect("host", nil)
	e.cmds, err = New(Config{Conn: e.host, Ingress: ingressOf(t, ex, e.audit, 0), WorkerID: 7, WorkerSubject: "kv-control-7",
		BroadcastSubject: "kv-control-broadcast", TenantSubjects: true, JetStream: jet})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cmds.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cmds.Close() })
	return e
}

// connect logs in as user; errs, when set, receives the server's
// asynchronous errors (permission violations).
func (e *tenantEnv) connect(user string, errs chan<- error) *nats.Conn {
	e.t.Helper()
	opts := []nats.Option{nats.UserInfo(user, user+"-pw")}
	if errs != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	}
	c, err := nats.Connect(e.url, opts...)
	if err != nil {
		e.t.Fatalf("connect as %s: %v", user, err)
	}
	e.t.Cleanup(c.Close)
	return c
}

func (e *tenantEnv) client(conn *nats.Conn, subject string, jet bool) *controlclient.NATSClient {
	e.t.Helper()
	c, err := controlclient.NewNATS(conn, controlclient.NATSOptions{Subject: subject, Source: "router", JetStream: jet})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// state is every tenant's pin counts, page by page.
func (e *tenantEnv) state() string {
	var b strings.Builder
	e.g.Do(func(ix *cache.Index) {
		for _, name := range []string{"", "alice", "bob"} {
			fmt.Fprintf(&b, "%q:", name)
			for _, q := range e.pages[name] {
				p, ok := ix.Lookup(name, q)
				fmt.Fprintf(&b, " %v/%d", ok, p.PinCount)
			}
			b.WriteString("; ")
		}
	})
	return b.String()
}

func (e *tenantEnv) pins(tenant string) (n int) {
	e.g.Do(func(ix *cache.Index) {
		p, _ := ix.Lookup(tenant, e.pages[tenant][0])
		n = p.PinCount
	})
	return n
}

func pinOf(tenant string, seq uint64) directive.Turn {
	return directive.Turn{Tenant: tenant, Directives: []directive.Directive{directive.Cache{BlockHashes: []directive.Hash{directive.Hash(seq)}, Pin: true}}}
}

func wantMismatch(t *testing.T, what string, e *errcode.Error, parts ...string) {
	t.Helper()
	if e == nil || e.Code != errcode.TenantMismatch {
		t.Fatalf("%s: got %v, want tenant_mismatch", what, e)
	}
	for _, p := range parts {
		if !strings.Contains(e.Error(), p) {
			t.Fatalf("%s: error %q does not mention %q", what, e.Error(), p)
		}
	}
	if e.Entry().Hint == "" {
		t.Fatalf("%s: tenant_mismatch has no hint", what)
	}
	t.Logf("%s: %s (hint: %s)", what, e.Error(), e.Entry().Hint)
}

// With nats.tenant_subjects, the NATS server's publish permissions decide
// who acts for which tenant: alice cannot publish on bob's subject at all
// (the server refuses it, bob's pages are untouched), a command on her
// subject naming bob is refused with a clear tenant_mismatch, her own
// commands act for her tenant only, and the bare subject acts for the
// default tenant only.
func TestTenantSubjectsConfineNATSUsers(t *testing.T) {
	e := newTenantEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	aliceErrs := make(chan error, 8)
	aliceConn := e.connect("alice", aliceErrs)
	alice := e.client(aliceConn, "kv-control-7.alice", false)
	// A host-side tap on bob's subject: what the server delivers there.
	tap, err := e.host.SubscribeSync("kv-control-7.bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.host.Flush(); err != nil {
		t.Fatal(err)
	}
	before := e.state()

	// 1. alice publishes on bob's subject: a permissions violation.
	if err := aliceConn.Publish("kv-control-7.bob", []byte(`{"type":"Cache","block_hashes":[`+itoa(e.pages["bob"][0])+`],"pin":true}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-aliceErrs:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") || !strings.Contains(err.Error(), "kv-control-7.bob") {
			t.Fatalf("server error for alice's publish on bob's subject: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not refuse alice's publish on bob's subject")
	}
	// And on the bare subject, which acts for the default tenant.
	if err := aliceConn.Publish("kv-control-7", []byte(`{"type":"Cache","block_hashes":[`+itoa(e.pages[""][0])+`],"pin":true}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-aliceErrs:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("server error for alice's publish on the bare subject: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not refuse alice's publish on the bare subject")
	}

	// 2. On her own subject, naming bob in the envelope or the header.
	r, err := alice.Apply(ctx, pinOf("bob", e.pages["bob"][0]))
	if err != nil {
		t.Fatal(err)
	}
	wantMismatch(t, "envelope naming bob", r.Error, "kv-control-7.alice", `"alice"`, `"bob"`, "kv-control-7.bob")
	cc, err := alice.CacheControl(ctx, directive.CacheControl{Action: directive.ActionPinBlocks, BlockHashes: []directive.Hash{directive.Hash(e.pages["bob"][0])}}, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if cc.Status != directive.StatusError || cc.Code != errcode.TenantMismatch || !strings.Contains(cc.Message, `"bob"`) {
		t.Fatalf("cache_control with Kvpilot-Tenant bob on alice's subject: %+v", cc)
	}
	if after := e.state(); after != before {
		t.Fatalf("refused commands changed the index:\n%s\n%s", before, after)
	}
	if n, _, _ := tap.Pending(); n != 0 {
		t.Fatal("the server delivered alice's publish on bob's subject")
	}
	rec, ok := e.audit.find(func(r executor.Record) bool { return r.Code == errcode.TenantMismatch && r.Verb == "turn" })
	if !ok || rec.Source != "nats[alice]:router" || rec.Tenant != "alice" || !strings.Contains(rec.Detail, `"bob"`) {
		t.Fatalf("refusal audit record %+v (found %v), want source nats[alice]:router, tenant alice", rec, ok)
	}

	// 3. Her own commands act for her tenant only. Naming no tenant acts
	// for alice: bob's page hash is not in her namespace.
	for _, tenant := range []string{"", "alice"} {
		if r, err := alice.Apply(ctx, pinOf(tenant, e.pages["alice"][0])); err != nil || !r.OK() {
			t.Fatalf("alice's pin naming tenant %q: %+v %v", tenant, r, err)
		}
	}
	if r, err := alice.Apply(ctx, pinOf("", e.pages["bob"][0])); err != nil || r.OK() {
		t.Fatalf("alice pinning bob's page hash from her subject: %+v %v", r, err)
	}
	if cc, err := alice.CacheControl(ctx, directive.CacheControl{Action: directive.ActionPinPrefix, TokenIDs: []uint32{1, 2, 3, 4}}, ""); err != nil || cc.Status != directive.StatusOK {
		t.Fatalf("alice's pin_prefix: %+v %v", cc, err)
	}
	if e.pins("alice") != 3 || e.pins("bob") != 0 || e.pins("") != 0 {
		t.Fatalf("after alice's pins: %s", e.state())
	}
	if _, ok := e.audit.find(func(r executor.Record) bool {
		return r.Status == directive.StatusOK && r.Source == "nats[alice]:router" && r.Tenant == "alice"
	}); !ok {
		t.Fatal("alice's applied pins are not audited with source nats[alice]:router and tenant alice")
	}

	// 4. The bare subject acts for the default tenant only (here the
	// host user, an operator, may publish on it).
	op := e.client(e.connect("host", nil), "kv-control-7", false)
	if r, err := op.Apply(ctx, pinOf("", e.pages[""][0])); err != nil || !r.OK() {
		t.Fatalf("default tenant's pin on the bare subject: %+v %v", r, err)
	}
	r, err = op.Apply(ctx, pinOf("alice", e.pages["alice"][0]))
	if err != nil {
		t.Fatal(err)
	}
	wantMismatch(t, "bare subject naming alice", r.Error, "default tenant", "kv-control-7.alice")
	if cc, err := op.CacheControl(ctx, directive.CacheControl{Action: directive.ActionPinBlocks, BlockHashes: []directive.Hash{directive.Hash(e.pages["bob"][0])}}, "bob"); err != nil || cc.Code != errcode.TenantMismatch {
		t.Fatalf("bare subject, Kvpilot-Tenant bob: %+v %v", cc, err)
	}
	// A broadcast subject with a tenant acts for that tenant.
	bc := e.client(e.host, "kv-control-broadcast.bob", false)
	if r, err := bc.Apply(ctx, pinOf("", e.pages["bob"][0])); err != nil || !r.OK() {
		t.Fatalf("bob's pin on kv-control-broadcast.bob: %+v %v", r, err)
	}
	if e.pins("") != 1 || e.pins("alice") != 3 || e.pins("bob") != 1 {
		t.Fatalf("final state: %s", e.state())
	}
}

// In JetStream mode the command stream carries the tenant subjects too,
// and the same binding holds for commands read from it.
func TestTenantSubjectsJetStream(t *testing.T) {
	e := newTenantEnv(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(e.host)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kv-control-7", "kv-control-broadcast", "kv-control-7.*", "kv-control-broadcast.*"} {
		if !slices.Contains(info.Config.Subjects, want) {
			t.Fatalf("command stream subjects %v lack %s", info.Config.Subjects, want)
		}
	}
	alice := e.client(e.connect("alice", nil), "kv-control-7.alice", true)
	r, err := alice.Apply(ctx, directive.Turn{ID: "t-bob", Tenant: "bob", Directives: pinOf("", e.pages["bob"][0]).Directives})
	if err != nil {
		t.Fatal(err)
	}
	wantMismatch(t, "JetStream envelope naming bob", r.Error, "kv-control-7.alice", `"bob"`)
	if r, err := alice.Apply(ctx, directive.Turn{ID: "t-alice", Directives: pinOf("", e.pages["alice"][0]).Directives}); err != nil || !r.OK() {
		t.Fatalf("alice's own pin through the stream: %+v %v", r, err)
	}
	if e.pins("alice") != 1 || e.pins("bob") != 0 {
		t.Fatalf("after JetStream commands: %s", e.state())
	}
}
