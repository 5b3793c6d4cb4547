package executor

import (
	"testing"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Every verb the directive package defines has its executor side (each
// kind of op is a type, so the compiler holds what kinds.go defines).
func TestEveryVerbHasAnOp(t *testing.T) {
	for _, v := range directive.Verbs {
		if verbOps[v] == nil {
			t.Errorf("verb %s has no entry in verbOps", v)
		}
	}
	if len(verbOps) != len(directive.Verbs) {
		t.Errorf("verbOps has %d entries for %d verbs", len(verbOps), len(directive.Verbs))
	}
}
