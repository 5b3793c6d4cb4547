package errcode

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/errcode/internal/errspec"
)

// The Go registry (registry_gen.go) and the Python SDK's classes
// (sdk/python/kvpilot/_errcodes.py) are both rendered from errors.json.
// These tests render them in memory and fail when a committed file differs
// from the data. Regenerate with go generate ./sdk/errcode, or
//
//	go test ./sdk/errcode -run 'TestGoRegistry|TestPythonRegistry' -rewrite
var rewrite = flag.Bool("rewrite", false, "rewrite the generated registries from errors.json")

const regenerate = "regenerate with: go generate ./sdk/errcode"

func loadSpec(t *testing.T) *errspec.Spec {
	t.Helper()
	s, err := errspec.Load("errors.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func checkGenerated(t *testing.T, path string, want []byte) {
	t.Helper()
	if *rewrite {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; %s", err, regenerate)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale against errors.json; %s", path, regenerate)
	}
}

func TestGoRegistry(t *testing.T) {
	want, err := loadSpec(t).RenderGo()
	if err != nil {
		t.Fatal(err)
	}
	checkGenerated(t, "registry_gen.go", want)
}

func TestPythonRegistry(t *testing.T) {
	checkGenerated(t, "../python/kvpilot/_errcodes.py", loadSpec(t).RenderPython())
}

// TestRegistryIsTheSpec checks the compiled registry row by row against the
// data, so a hand edit of registry_gen.go that kept it in gofmt shape
// still fails.
func TestRegistryIsTheSpec(t *testing.T) {
	spec := loadSpec(t)
	all := All()
	if len(all) != len(spec.Errors) {
		t.Fatalf("registry has %d rows, errors.json %d", len(all), len(spec.Errors))
	}
	for i, e := range spec.Errors {
		g, _ := errspec.GRPCCode(e.GRPC)
		want := Entry{Code(e.Code), e.Number, g, e.Message, e.Hint}
		if all[i] != want {
			t.Errorf("row %d: registry %+v, errors.json %+v", i, all[i], want)
		}
	}
}
