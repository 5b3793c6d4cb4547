package errcode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestRegistryRows(t *testing.T) {
	for _, e := range All() {
		if e.Code == "" || e.Message == "" || e.Hint == "" {
			t.Errorf("%d: incomplete row %+v", e.Number, e)
		}
		if strings.ToLower(string(e.Code)) != string(e.Code) || strings.ContainsAny(string(e.Code), " -") {
			t.Errorf("code %q: want lower_snake_case", e.Code)
		}
		if e.Number < 1000 || e.Number > 9999 {
			t.Errorf("%s: number %d outside 1000..9999", e.Code, e.Number)
		}
		if got, ok := LookupNumber(e.Number); !ok || got.Code != e.Code {
			t.Errorf("LookupNumber(%d) = %v %v", e.Number, got, ok)
		}
	}
}

func TestSentinelsAndWrapping(t *testing.T) {
	base := New(UnknownBlock, "hash %d", 7)
	wrapped := fmt.Errorf("pin: %w", base.At(3))
	if !errors.Is(wrapped, ErrUnknownBlock) || errors.Is(wrapped, ErrUnknownLease) {
		t.Fatalf("errors.Is broken for %v", wrapped)
	}
	e, ok := As(wrapped)
	if !ok || e.Index != 3 || base.Index != -1 {
		t.Fatalf("As: %v %v (At must copy)", e, ok)
	}
	if got := e.Error(); got != "directive 3: unknown_block: unknown block: hash 7" {
		t.Fatalf("Error() = %q", got)
	}
	cause := Wrap(BadRequest, io.ErrUnexpectedEOF, "body")
	if !errors.Is(cause, io.ErrUnexpectedEOF) {
		t.Fatal("Wrap lost the cause")
	}
	if From(io.EOF).Code != Internal || From(nil) != nil || From(base) != base {
		t.Fatal("From mapping wrong")
	}
	if (&Error{Code: "made_up"}).Entry().Code != Internal {
		t.Fatal("unregistered code must read as internal")
	}
	if ErrRateLimited.GRPCCode() != 8 { // codes.ResourceExhausted
		t.Fatalf("grpc code %v", ErrRateLimited.GRPCCode())
	}
}

func TestJSON(t *testing.T) {
	out, err := json.Marshal(Wrap(InvalidTTL, errors.New("boom"), "ttl_seconds").At(0))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":"invalid_ttl","number":2002,"message":"invalid ttl","hint":"send seconds as a non-negative number, or a duration string such as \"30s\", \"5m\", \"1h\"","detail":"ttl_seconds: boom","index":0}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	var back Error
	if err := json.Unmarshal(out, &back); err != nil || back.Code != InvalidTTL || back.Index != 0 || back.Detail != "ttl_seconds: boom" {
		t.Fatalf("back %+v %v", back, err)
	}
}

// An error says its code and message once, however it was wrapped: a
// cause that repeats the message, a registry error wrapped in another, a
// refusal relayed from another kvpilot.
func TestMessageSaidOnce(t *testing.T) {
	soon := errors.New(`invalid ttl: "soon": want seconds`)
	inner := New(NotSupportedYet, "edit type %q", "x")
	for _, c := range []struct {
		err  *Error
		want string
	}{
		{Wrap(InvalidTTL, soon, "ttl_seconds"), `invalid_ttl: invalid ttl: ttl_seconds: "soon": want seconds`},
		{Wrap(CapacityExhausted, fmt.Errorf("pause to disk: %w", errors.New("tier capacity exhausted")), "Pause"), "capacity_exhausted: tier capacity exhausted: Pause: pause to disk"},
		{Wrap(NotSupportedYet, inner, "context_management.edits[0]"), `not_supported_yet: not supported yet: context_management.edits[0]: edit type "x"`},
		{New(BadRequest, "upstream: %s", "bad_request: malformed request: messages[0]: unknown role"), "bad_request: malformed request: upstream: messages[0]: unknown role"},
		{Wrap(BadRequest, New(InvalidTTL, "5x").At(1), "turn"), "bad_request: malformed request: turn: directive 1: invalid ttl: 5x"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}
