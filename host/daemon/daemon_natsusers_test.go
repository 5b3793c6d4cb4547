package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// With nats.users the embedded server takes only clients with a listed
// nkey and confines each to its tenants' command subjects: router-a may
// command tenant a and nothing else, an anonymous client is refused, and
// the host's own connections keep working.
func TestEmbeddedServerUsersConfinedToTheirTenants(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	addr := "127.0.0.1:" + freePort(t)
	d := isolationHost(t, func(c *config.Config) {
		c.NATS.Listen = addr
		c.NATS.TenantSubjects = true
		c.NATS.Users = []config.NATSUser{{Name: "router-a", NKey: pub, Tenants: []string{"a"}}}
	})
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	ha, _ := commitPages(t, d, "a", toks)
	hb, _ := commitPages(t, d, "b", toks)

	if _, err := nats.Connect("nats://" + addr); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous client: %v, want an authorization violation", err)
	}
	denied := make(chan string, 4)
	conn, err := nats.Connect("nats://"+addr, nats.Nkey(pub, kp.Sign), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		denied <- err.Error()
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pin := func(h uint64) []directive.Directive {
		return []directive.Directive{directive.Cache{BlockHashes: isoHashes(h), Pin: true, TTL: directive.TTLOf(time.Hour)}}
	}
	// Tenant b's subject: the server refuses the publish, the host never
	// sees it, b is unchanged.
	asB, err := controlclient.NewNATS(conn, controlclient.NATSOptions{Subject: d.cfg.WorkerSubject() + ".b", Source: "router-a"})
	if err != nil {
		t.Fatal(err)
	}
	before := tenantState(d, "b", hb.Sequence)
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	if r, err := asB.Apply(short, directive.Turn{Directives: pin(hb.Sequence[0])}); err == nil {
		t.Fatalf("router-a commanded tenant b: %+v", r)
	}
	cancelShort()
	select {
	case msg := <-denied:
		if !strings.Contains(strings.ToLower(msg), "permissions violation") {
			t.Fatalf("server said %q, want a permissions violation", msg)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no permissions violation reported for b's subject")
	}
	if after := tenantState(d, "b", hb.Sequence); after != before {
		t.Fatalf("b changed:\n before %s\n after  %s", before, after)
	}
	// Its own tenant's subject works.
	asA, err := controlclient.NewNATS(conn, controlclient.NATSOptions{Subject: d.cfg.WorkerSubject() + ".a", Source: "router-a"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := asA.Apply(ctx, directive.Turn{Directives: pin(ha.Sequence[0])}); err != nil || !r.OK() {
		t.Fatalf("router-a on its own subject: %+v %v", r, err)
	}
	if p, _ := pageInfo(d, "a", ha.Sequence[0]); p.PinCount != 1 {
		t.Fatalf("a's pin count %d", p.PinCount)
	}
	// The host's own connections (in-process, with the nkey it made at
	// start) keep every right: one commands tenant b on b's subject.
	hostConn, err := d.core.nats.Connect("operator")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hostConn.Close)
	opB, err := controlclient.NewNATS(hostConn, controlclient.NATSOptions{Subject: d.cfg.WorkerSubject() + ".b", Source: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := opB.Apply(ctx, directive.Turn{Directives: pin(hb.Sequence[0])}); err != nil || !r.OK() {
		t.Fatalf("the host's own client on b's subject: %+v %v", r, err)
	}
}
