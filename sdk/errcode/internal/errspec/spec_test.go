package errspec

import (
	"strings"
	"testing"
)

func validSpec() Spec {
	return Spec{
		Families: []Family{{Name: "invalid", Group: 2, Python: "InvalidError"}},
		Errors: []Error{{Code: "invalid_ttl", Name: "InvalidTTL", Number: 2002, Family: "invalid",
			GRPC: "InvalidArgument", Message: "m", Hint: "h"}},
	}
}

// TestValidateRefuses lists what the generator must refuse before it writes
// a registry deployed clients would read differently.
func TestValidateRefuses(t *testing.T) {
	cases := map[string]func(*Spec){
		"duplicate code": func(s *Spec) {
			e := s.Errors[0]
			e.Name, e.Number = "Other", 2003
			s.Errors = append(s.Errors, e)
		},
		"duplicate number": func(s *Spec) {
			e := s.Errors[0]
			e.Name, e.Code = "Other", "other"
			s.Errors = append(s.Errors, e)
		},
		"outside family":        func(s *Spec) { s.Errors[0].Number = 3002 },
		"unknown family":        func(s *Spec) { s.Errors[0].Family = "nope" },
		"unknown gRPC status":   func(s *Spec) { s.Errors[0].GRPC = "Teapot" },
		"want lower_snake_case": func(s *Spec) { s.Errors[0].Code = "Invalid-TTL" },
		"not an exported Go":    func(s *Spec) { s.Errors[0].Name = "invalidTTL" },
		"hint are required":     func(s *Spec) { s.Errors[0].Hint = "" },
		"which is no registry code": func(s *Spec) {
			s.GRPCFallback.Statuses = []StatusToCode{{GRPC: "Unavailable", Code: "nope"}}
		},
		"mapped twice": func(s *Spec) {
			s.GRPCFallback.Statuses = []StatusToCode{{GRPC: "Canceled", Code: "invalid_ttl"}, {GRPC: "Canceled", Code: "invalid_ttl"}}
		},
		"grpc_fallback: unknown gRPC status": func(s *Spec) {
			s.GRPCFallback.Statuses = []StatusToCode{{GRPC: "Teapot", Code: "invalid_ttl"}}
		},
	}
	ok := validSpec()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid spec refused: %v", err)
	}
	for want, breakIt := range cases {
		s := validSpec()
		breakIt(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

func TestPythonClass(t *testing.T) {
	for code, want := range map[string]string{"bad_request": "BadRequest", "invalid_ttl": "InvalidTTL", "invalid_lease_id": "InvalidLeaseID"} {
		if got := PythonClass(code); got != want {
			t.Errorf("%s: %s, want %s", code, got, want)
		}
	}
}
