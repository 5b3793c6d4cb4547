package executor

import (
	"testing"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Every verb the directive package defines has its executor side, and
// every kind an op can have is defined.
func TestEveryVerbHasAnOp(t *testing.T) {
	for _, v := range directive.Verbs {
		if verbOps[v] == nil {
			t.Errorf("verb %s has no entry in verbOps", v)
		}
	}
	if len(verbOps) != len(directive.Verbs) {
		t.Errorf("verbOps has %d entries for %d verbs", len(verbOps), len(directive.Verbs))
	}
	if int(opResume) != len(kinds)-1 {
		t.Errorf("kinds defines %d kinds, the last op kind is %d", len(kinds), opResume)
	}
}
