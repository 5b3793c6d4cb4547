package errcode

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// statusCase is one row of testdata/status_messages.json, which the Python
// SDK's tests read too: both languages read a gRPC status the same way.
type statusCase struct {
	GRPC    uint32 `json:"grpc"`
	Message string `json:"message"`
	Code    Code   `json:"code"`
	Detail  string `json:"detail"`
	Index   int    `json:"index"`
}

func TestFromStatusFollowsTheSharedCases(t *testing.T) {
	b, err := os.ReadFile("testdata/status_messages.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Cases []statusCase }
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range f.Cases {
		e := FromStatus(c.GRPC, c.Message)
		if e.Code != c.Code || e.Detail != c.Detail || e.Index != c.Index {
			t.Errorf("status %d %q: got %s %q %d, want %s %q %d", c.GRPC, c.Message, e.Code, e.Detail, e.Index, c.Code, c.Detail, c.Index)
		}
	}
}

// What Error writes, ParseMessage reads back whole, for every code.
func TestParseMessageReadsErrorBack(t *testing.T) {
	for _, ent := range All() {
		for _, e := range []*Error{New(ent.Code, ""), New(ent.Code, "block %d", 7).At(3), Wrap(ent.Code, errors.New("cause"), "where")} {
			back, ok := ParseMessage(e.Error())
			if !ok || back.Code != e.Code || back.Index != e.Index || back.Error() != e.Error() {
				t.Errorf("%q read back as %v (%v)", e.Error(), back, ok)
			}
		}
	}
}
