// Package errspec reads sdk/errcode/errors.json, the one data file every
// client-visible error is defined in, and renders it as the Go registry and
// the Python SDK's exception classes. Keeping the data in one file and the
// code generated means a code, its number, message and hint are written
// once, and a test fails when a generated file falls behind the data.
package errspec

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
)

// Spec is the whole errors.json.
type Spec struct {
	Rules        string   `json:"rules"`
	Families     []Family `json:"families"`
	GRPCFallback Fallback `json:"grpc_fallback"`
	Errors       []Error  `json:"errors"`
}

// Fallback is what a gRPC status without a registry code in its message
// reads as, by status; every other status reads as internal.
type Fallback struct {
	About    string         `json:"about"`
	Statuses []StatusToCode `json:"statuses"`
}

// StatusToCode maps one gRPC status name to a registry code.
type StatusToCode struct {
	GRPC string `json:"grpc"`
	Code string `json:"code"`
}

// Family is a number group: 2xxx is "invalid", and so on.
type Family struct {
	Name   string `json:"name"`
	Group  uint16 `json:"group"`  // a number's thousands digit
	Python string `json:"python"` // base exception class in the Python SDK
	About  string `json:"about"`
}

// Error is one registry row.
type Error struct {
	Code    string `json:"code"`   // stable wire code, lower_snake_case
	Name    string `json:"name"`   // Go identifier of the code; the sentinel is Err+Name
	Number  uint16 `json:"number"` // stable number; its thousands digit names the family
	Family  string `json:"family"`
	GRPC    string `json:"grpc"` // gRPC status name it travels under
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

// grpcCodes are the gRPC status codes by name (google.golang.org/grpc/codes);
// the registry stores values so that sdk/errcode does not import grpc.
var grpcCodes = map[string]uint32{
	"Canceled": 1, "Unauthenticated": 16, "InvalidArgument": 3, "DeadlineExceeded": 4, "NotFound": 5, "AlreadyExists": 6,
	"PermissionDenied": 7, "ResourceExhausted": 8, "FailedPrecondition": 9,
	"Aborted": 10, "Unimplemented": 12, "Internal": 13, "Unavailable": 14,
}

// GRPCCode is the value of a gRPC status name, false when unknown.
func GRPCCode(name string) (uint32, bool) {
	v, ok := grpcCodes[name]
	return v, ok
}

// Load reads and validates the spec at path.
func Load(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read error spec: %w", err)
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

var (
	codeRE = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	nameRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
)

// Validate refuses what would silently change what deployed clients read:
// a reused code, name or number, a number outside its family, an unknown
// gRPC status, or a row missing its message or hint.
func (s *Spec) Validate() error {
	fams := map[string]Family{}
	for _, f := range s.Families {
		fams[f.Name] = f
	}
	seen := map[string]bool{}
	for _, e := range s.Errors {
		if err := e.validate(fams); err != nil {
			return err
		}
		for _, k := range []string{"code " + e.Code, "name " + e.Name, fmt.Sprint("number ", e.Number)} {
			if seen[k] {
				return fmt.Errorf("duplicate %s", k)
			}
			seen[k] = true
		}
	}
	return s.validateFallback(seen)
}

// validateFallback refuses a fallback to a code the registry lacks, an
// unknown status, or one status mapped twice.
func (s *Spec) validateFallback(seen map[string]bool) error {
	mapped := map[string]bool{}
	for _, f := range s.GRPCFallback.Statuses {
		switch {
		case !seen["code "+f.Code]:
			return fmt.Errorf("grpc_fallback: %s reads as %q, which is no registry code", f.GRPC, f.Code)
		case mapped[f.GRPC]:
			return fmt.Errorf("grpc_fallback: %s mapped twice", f.GRPC)
		}
		if _, ok := grpcCodes[f.GRPC]; !ok {
			return fmt.Errorf("grpc_fallback: unknown gRPC status %q", f.GRPC)
		}
		mapped[f.GRPC] = true
	}
	return nil
}

// Name returns the Go identifier of a registry code.
func (s *Spec) Name(code string) string {
	for _, e := range s.Errors {
		if e.Code == code {
			return e.Name
		}
	}
	return ""
}

func (e Error) validate(fams map[string]Family) error {
	switch f, ok := fams[e.Family]; {
	case !codeRE.MatchString(e.Code):
		return fmt.Errorf("code %q: want lower_snake_case", e.Code)
	case !nameRE.MatchString(e.Name):
		return fmt.Errorf("%s: name %q is not an exported Go identifier", e.Code, e.Name)
	case !ok:
		return fmt.Errorf("%s: unknown family %q", e.Code, e.Family)
	case e.Number < 1000 || e.Number > 9999 || e.Number/1000 != f.Group:
		return fmt.Errorf("%s: number %d outside family %s (%dxxx)", e.Code, e.Number, f.Name, f.Group)
	case e.Message == "" || e.Hint == "":
		return fmt.Errorf("%s: message and hint are required", e.Code)
	}
	if _, ok := grpcCodes[e.GRPC]; !ok {
		return fmt.Errorf("%s: unknown gRPC status %q", e.Code, e.GRPC)
	}
	return nil
}

// Family returns the named family.
func (s *Spec) Family(name string) Family {
	for _, f := range s.Families {
		if f.Name == name {
			return f
		}
	}
	return Family{}
}
