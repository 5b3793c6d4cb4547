// Package policies lists kvpilot's built-in policies. Each lives in its own
// package (truncation, thinkevict, idlepause, autopin) and runs as a
// separate process of the kvpilot binary: `kvpilot policy NAME`.
package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kvpilot/kvpilot/policies/autopin"
	"github.com/kvpilot/kvpilot/policies/idlepause"
	"github.com/kvpilot/kvpilot/policies/thinkevict"
	"github.com/kvpilot/kvpilot/policies/truncation"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// ErrUnknown is wrapped when a name is not a built-in.
var ErrUnknown = errors.New("unknown built-in policy")

var builtins = map[string]func() policy.Policy{
	truncation.Name: func() policy.Policy { return truncation.New() },
	thinkevict.Name: func() policy.Policy { return thinkevict.New() },
	idlepause.Name:  func() policy.Policy { return idlepause.New() },
	autopin.Name:    func() policy.Policy { return autopin.New() },
}

// Names lists the built-ins, sorted.
func Names() []string {
	out := make([]string, 0, len(builtins))
	for n := range builtins {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New returns a fresh, unconfigured built-in policy.
func New(name string) (policy.Policy, error) {
	f, ok := builtins[name]
	if !ok {
		return nil, fmt.Errorf("%q: %w (built-ins: %s)", name, ErrUnknown, strings.Join(Names(), ", "))
	}
	return f(), nil
}

// Check configures a fresh built-in with params, as its process will, so
// that a wrong name or wrong params are refused when the config loads
// instead of when the plugin starts. A nil params is "{}".
func Check(name string, params map[string]any) error {
	p, err := New(name)
	if err != nil {
		return err
	}
	raw := []byte("{}")
	if params != nil {
		if raw, err = json.Marshal(params); err != nil {
			return fmt.Errorf("params: %w", err)
		}
	}
	return p.Configure(raw)
}
