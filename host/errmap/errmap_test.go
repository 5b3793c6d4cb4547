package errmap

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Every sentinel maps to a code the registry holds, wrapped or not, and
// keeps its message; a registry error passes through; anything else is
// internal.
func TestEverySentinelHasARegistryCode(t *testing.T) {
	for _, m := range codes {
		if _, ok := errcode.Lookup(m.code); !ok {
			t.Errorf("%v maps to %q, which the registry does not hold", m.err, m.code)
		}
		wrapped := fmt.Errorf("page 7 on host: %w", m.err)
		if got := Code(wrapped); got != m.code {
			t.Errorf("Code(%v) = %q, want %q", wrapped, got, m.code)
		}
		e := Wrap(wrapped, "match")
		if e.Code != m.code || !errors.Is(e, m.err) {
			t.Errorf("Wrap(%v) = %v (code %q)", wrapped, e, e.Code)
		}
	}
	// The tables the executor and the engine used to keep apart: a TTL
	// error from the engine's path and a full pool from the executor's.
	if Code(cache.ErrBadTTL) != errcode.InvalidTTL || Code(pool.ErrFull) != errcode.CapacityExhausted {
		t.Error("a sentinel mapped by only one of the old tables")
	}
	reg := errcode.New(errcode.UnknownSession, "no such session")
	if got := Wrap(fmt.Errorf("splice: %w", reg), "x"); got != reg {
		t.Errorf("a registry error was rewrapped: %v", got)
	}
	if Code(errors.New("boom")) != errcode.Internal || Wrap(nil, "x") != nil {
		t.Error("an unknown error must be internal, nil stays nil")
	}
	if Code(context.DeadlineExceeded) != errcode.DeadlineExceeded {
		t.Error("a deadline must be deadline_exceeded")
	}
}
