package engineclient

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A request the host went away under (restart, reset socket) runs again
// from the start; a request's own error, or a cancelled context, ends it.
func TestRunRequestRetriesOnlyWhenTheHostWentAway(t *testing.T) {
	c := &Client{log: hclog.NewNullLogger()}
	fast := Retry{Attempts: 4, First: time.Millisecond, Max: 2 * time.Millisecond}
	cases := []struct {
		name  string
		errs  []error
		calls int
		ok    bool
	}{
		{"restart then ok", []error{fmt.Errorf("%w: x", ErrHostRestarted), nil}, 2, true},
		{"reset then ok", []error{errcode.New(errcode.Unavailable, "connection reset by peer"), nil}, 2, true},
		{"own error", []error{errcode.New(errcode.BadRequest, "no")}, 1, false},
		{"gone every time", []error{ErrHostRestarted, ErrHostRestarted, ErrHostRestarted, ErrHostRestarted, nil}, 4, false},
	}
	for _, tc := range cases {
		calls := 0
		err := c.RunRequest(context.Background(), fast, func(context.Context) error {
			calls++
			return tc.errs[calls-1]
		})
		if calls != tc.calls || (err == nil) != tc.ok {
			t.Errorf("%s: %d calls, err %v; want %d calls, ok %v", tc.name, calls, err, tc.calls, tc.ok)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.RunRequest(ctx, Retry{First: time.Hour}, func(context.Context) error { return ErrHostRestarted })
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrHostRestarted) {
		t.Fatalf("cancelled during the wait: %v", err)
	}
}
