package daemon

import (
	"fmt"
	"os"
	"testing"

	"github.com/kvpilot/kvpilot/policies"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// TestMain lets the test binary stand in for `kvpilot policy NAME`, so
// built-in policies run as real plugin processes in these tests.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "policy" {
		p, err := policies.New(os.Args[2])
		if err == nil {
			err = policy.Run(p)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
