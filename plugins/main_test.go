package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/policies"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// The test binary doubles as the plugin binary: launched as
// `<test binary> policy NAME` (a built-in) or with KVPILOT_TEST_SERVE=NAME
// (an external plugin), it serves NAME instead of running tests. That keeps
// the plugin processes real without a `go build` per test run.
func TestMain(m *testing.M) {
	if name := os.Getenv("KVPILOT_TEST_SERVE"); name != "" {
		serve(name)
	}
	if len(os.Args) == 3 && os.Args[1] == "policy" {
		serve(os.Args[2])
	}
	// The test binary's own built-ins (serve below) pass the config's check.
	config.CheckBuiltin = func(name string, params map[string]any) error {
		if name == "echo" || name == "hang" {
			return nil
		}
		return policies.Check(name, params)
	}
	os.Exit(m.Run())
}

func serve(name string) {
	var p policy.Policy
	switch name {
	case "echo":
		p = &echo{}
	case "hang":
		p = &echo{hangOn: "hang"}
	default:
		var err error
		if p, err = policies.New(name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if err := policy.Run(p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// echo answers every observation with one Retain whose End is the
// observation's Seq and whose Priority is the configured tag, so the sink
// can tell which observation, and which instance, a turn came from.
type echo struct {
	tag    int
	hangOn string
}

func (*echo) Info() policy.Info {
	return policy.Info{Name: "echo", Version: "test", Subscriptions: []policy.Kind{policy.KindRequestStarted, policy.KindTick}}
}

func (e *echo) Configure(raw json.RawMessage) error {
	var p struct {
		Tag  int  `json:"tag"`
		Fail bool `json:"fail"`
	}
	if err := policy.DecodeParams(raw, &p); err != nil {
		return err
	}
	if p.Fail {
		return fmt.Errorf("refusing params as asked")
	}
	e.tag = p.Tag
	return nil
}

func (e *echo) Observe(ctx context.Context, obs policy.Observation) ([]policy.Directive, error) {
	if e.hangOn != "" && obs.Session == e.hangOn {
		<-ctx.Done()
		time.Sleep(time.Hour) // hung: ignores its deadline
	}
	s := obs.Session
	if s == "" {
		s = "tick"
	}
	return []policy.Directive{directive.Retain{Session: s, End: int64(obs.Seq), Priority: e.tag}}, nil
}
