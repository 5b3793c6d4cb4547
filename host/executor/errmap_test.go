package executor

import (
	"fmt"
	"testing"

	"github.com/kvpilot/kvpilot/host/errmap"
)

// TestErrorsMapOnce checks that the executor's verbs and its span verbs
// give every host sentinel the code errmap gives it; they once kept tables
// of their own that disagreed.
func TestErrorsMapOnce(t *testing.T) {
	for _, s := range errmap.Sentinels() {
		err := fmt.Errorf("pin 0x2a: %w", s.Err)
		if got := fromCache(err).Code; got != s.Code {
			t.Errorf("fromCache(%v) = %s, want %s", s.Err, got, s.Code)
		}
		if got := fromSplice(err).Code; got != s.Code {
			t.Errorf("fromSplice(%v) = %s, want %s", s.Err, got, s.Code)
		}
	}
}
