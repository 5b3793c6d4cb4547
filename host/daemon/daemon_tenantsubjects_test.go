package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// nats.tenant_subjects from the config reaches the command plane: a
// command on <worker_subject>.a acts for tenant a only, whatever tenant
// its payload claims. (The NATS users whose permissions confine them to
// such subjects are tested in host/control/natscmd.)
func TestTenantSubjectsFromConfig(t *testing.T) {
	d := isolationHost(t, func(c *config.Config) { c.NATS.TenantSubjects = true })
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	ha, _ := commitPages(t, d, "a", toks)
	hb, _ := commitPages(t, d, "b", toks)
	conn, err := d.core.nats.Connect("router-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	asA, err := controlclient.NewNATS(conn, controlclient.NATSOptions{Subject: d.cfg.WorkerSubject() + ".a", Source: "router-a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pin := func(h uint64) []directive.Directive {
		return []directive.Directive{directive.Cache{BlockHashes: isoHashes(h), Pin: true, TTL: directive.TTLOf(time.Hour)}}
	}
	before := tenantState(d, "b", hb.Sequence)
	r, err := asA.Apply(ctx, directive.Turn{Tenant: "b", Directives: pin(hb.Sequence[0])})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.Error == nil || r.Error.Code != errcode.TenantMismatch {
		t.Fatalf("a command on a's subject claiming tenant b: %+v", r)
	}
	if after := tenantState(d, "b", hb.Sequence); after != before {
		t.Fatalf("b changed:\n before %s\n after  %s", before, after)
	}
	if r, err := asA.Apply(ctx, directive.Turn{Directives: pin(ha.Sequence[0])}); err != nil || !r.OK() {
		t.Fatalf("a's own pin on its subject: %+v %v", r, err)
	}
	if p, _ := pageInfo(d, "a", ha.Sequence[0]); p.PinCount != 1 {
		t.Fatalf("a's page pin count %d after its pin", p.PinCount)
	}
}
