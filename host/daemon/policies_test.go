package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// startWithPolicies starts a host from a config file, running built-ins
// from this test binary and watching the file.
func startWithPolicies(t *testing.T, path string) (*Daemon, func()) {
	t.Helper()
	c, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(c, hclog.NewNullLogger(), WithPolicyExecutable(exe), WithConfigFile(path, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return d, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func TestPolicyPinsThroughExecutorAndHotSwaps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kvpilot.yaml")
	base := "data_dir: " + filepath.Join(dir, "data") + "\nhttp: {listen: \"\"}\nnats: {listen: \"\"}\n" +
		"index: {page_size: 4}\npolicy_runtime: {tick_interval: 50ms}\n"
	if err := os.WriteFile(path, []byte(base+"policies:\n  - {name: hot, builtin: auto-pin, params: {min_hits: 2, ttl: 1h}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, stop := startWithPolicies(t, path)
	defer stop()
	if got := d.policies.Policies(); !slices.Equal(got, []string{"hot"}) {
		t.Fatalf("running %v", got)
	}

	// A prefix cached in the index and seen by two sessions gets pinned by
	// auto-pin, through the executor, once a request on it finished.
	c := d.Config()
	h := commitTokens(t, d, "acme", []uint32{1, 2, 3, 4, 5, 6, 7, 8}, c.Index.PageSize)
	for i := 0; i < 2; i++ {
		d.Observe(policy.Observation{
			Time: time.Now(), Kind: policy.KindRequestStarted, Session: fmt.Sprint("s", i), Tenant: "acme",
			Started: &policy.RequestStarted{RequestID: "r", Turn: int64(i), PromptTokens: 8, PageSize: 4, BlockHashes: h.Sequence},
		})
		d.Observe(policy.Observation{
			Time: time.Now(), Kind: policy.KindRequestFinished, Session: fmt.Sprint("s", i), Tenant: "acme",
			Finished: &policy.RequestFinished{RequestID: "r", BlockHashes: h.Sequence},
		})
	}
	waitFor(t, "auto-pin to pin the prefix", func() bool {
		p, _ := pageInfo(d, "acme", h.Sequence[1])
		return p.PinCount > 0
	})

	d.core.audit.Flush()
	recs, err := executor.ReadAuditFile(filepath.Join(dir, "data", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 || recs[0].Source != "hot" || recs[0].Tenant != "acme" {
		t.Fatalf("audit records %+v, want the pin under source \"hot\"", recs)
	}
	// A policy's turn is counted in the directive metrics as every door's.
	var m dto.Metric
	if err := d.Metrics().Directives.WithLabelValues(recs[0].Verb, "ok").Write(&m); err != nil || m.GetCounter().GetValue() < 1 {
		t.Fatalf("the policy's %s is not counted in kvpilot_directives_total: %v %v", recs[0].Verb, m.GetCounter().GetValue(), err)
	}

	// Editing the file swaps the set while the host serves.
	if err := os.WriteFile(path, []byte(base+"policies:\n  - {name: idle, builtin: idle-pause}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "hot-swap to idle-pause", func() bool { return slices.Equal(d.policies.Policies(), []string{"idle"}) })

	// An invalid edit is rejected and the running set stays.
	if err := os.WriteFile(path, []byte(base+"policies:\n  - {name: bad, builtin: no-such-policy}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if got := d.policies.Policies(); !slices.Equal(got, []string{"idle"}) {
		t.Fatalf("a bad config replaced the running set: %v", got)
	}
}
