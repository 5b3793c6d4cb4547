package engine

import (
	"fmt"
	"testing"

	"github.com/kvpilot/kvpilot/host/errmap"
)

// TestErrorsMapOnce checks that the engine service gives every host
// sentinel the code errmap (and so the executor) gives it.
func TestErrorsMapOnce(t *testing.T) {
	for _, s := range errmap.Sentinels() {
		e := mapIndexErr(fmt.Errorf("commit: %w", s.Err), "request %q", "r1")
		if e.Code != s.Code || e.Detail != `request "r1"` {
			t.Errorf("mapIndexErr(%v) = %s %q, want %s", s.Err, e.Code, e.Detail, s.Code)
		}
	}
}
