// Package policytest runs a kvpilot policy without a host, for its author's
// unit tests.
//
// New starts the policy behind a real gRPC server on an in-memory
// connection, negotiates Info and calls Configure exactly as the host does,
// so what a test sees is what the host would see, conversions included.
// Observe delivers one observation and returns the directives, after
// checking them with the same turn rules the host's executor applies.
//
// Replay drives a policy through a recorded agent session (the JSON Lines
// traces under shared/traces) with a small simulated host that applies the
// policy's splices to its model of the session's cache, so positions in
// later observations reflect earlier edits. Golden compares output with a
// file under testdata and rewrites it under -rewrite.
package policytest

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policy/pluginwire"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// Harness is one running policy.
type Harness struct {
	t      testing.TB
	client *pluginwire.Client
	info   pluginwire.Negotiated
	subs   map[policy.Kind]bool
	seq    uint64
	// Limits are the turn rules directives are checked against.
	Limits directive.Limits
	// Tenant is stamped on observations that have none.
	Tenant string
}

// New starts p, negotiates Info and configures it with params (marshaled
// to JSON; nil means "{}"). It fails the test on any error.
func New(t testing.TB, p policy.Policy, params any) *Harness {
	t.Helper()
	h, err := Start(t, p, params)
	if err != nil {
		t.Fatalf("policytest: %v", err)
	}
	return h
}

// Start is New returning the error, for tests of refused params.
func Start(t testing.TB, p policy.Policy, params any) (*Harness, error) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pb.RegisterPolicyServer(srv, pluginwire.NewServer(p, nil))
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///policytest",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	t.Cleanup(func() { _ = conn.Close(); srv.Stop() })

	h := &Harness{t: t, client: pluginwire.NewClient(conn), subs: map[policy.Kind]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.info, err = h.client.Info(ctx, []uint32{policy.APIVersion})
	if err != nil {
		return nil, err
	}
	for _, k := range h.info.Subscriptions {
		h.subs[k] = true
	}
	raw := []byte("{}")
	if params != nil {
		if raw, err = json.Marshal(params); err != nil {
			return nil, err
		}
	}
	if err := h.client.Configure(ctx, raw, h.info.APIVersion); err != nil {
		return nil, err
	}
	return h, nil
}

// Info returns the policy's negotiated Info.
func (h *Harness) Info() pluginwire.Negotiated { return h.info }

// Subscribed reports whether the policy wants kind k.
func (h *Harness) Subscribed(k policy.Kind) bool { return h.subs[k] }

// Observe delivers obs (numbering it when Seq is 0) and returns the
// policy's directives. Like the host it delivers only subscribed kinds
// (returning nil for others). A policy error, an undecodable directive or a
// turn the executor would refuse fails the test.
func (h *Harness) Observe(obs policy.Observation) []directive.Directive {
	h.t.Helper()
	ds, err := h.TryObserve(obs)
	if err != nil {
		h.t.Fatalf("policytest: observation %d (%v, session %q): %v", obs.Seq, obs.Kind, obs.Session, err)
	}
	return ds
}

// TryObserve is Observe returning the error.
func (h *Harness) TryObserve(obs policy.Observation) ([]directive.Directive, error) {
	if !h.subs[obs.Kind] {
		return nil, nil
	}
	h.seq++
	if obs.Seq == 0 {
		obs.Seq = h.seq
	}
	if obs.Tenant == "" {
		obs.Tenant = h.Tenant
	}
	p, err := pluginwire.ToProto(obs)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := h.client.Observe(ctx, []*pb.Observation{p})
	if err != nil {
		return nil, err
	}
	if rs[0].Err != nil {
		return nil, rs[0].Err
	}
	ds := rs[0].Directives
	if len(ds) == 0 {
		return nil, nil
	}
	// Validate each tenant's directives as the turn the host would run, and
	// hand scoped directives back scoped (policy.Unwrap reads them).
	byTenant := map[string][]directive.Directive{}
	var order []string
	for i, d := range ds {
		t := obs.Tenant
		if rs[0].Tenants != nil && rs[0].Tenants[i] != "" {
			t = rs[0].Tenants[i]
			ds[i] = policy.WithTenant(t, d)
		}
		if _, seen := byTenant[t]; !seen {
			order = append(order, t)
		}
		byTenant[t] = append(byTenant[t], d)
	}
	for _, t := range order {
		if err := directive.ValidateTurn(directive.Turn{Source: h.info.Name, Tenant: t, Directives: byTenant[t]}, h.Limits); err != nil {
			return ds, err
		}
	}
	return ds, nil
}
