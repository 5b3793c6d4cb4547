package errmap

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/splice"
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

// TestEverySentinelIsListed parses cache, pool and splice and fails when an
// exported Err* variable is in neither codes nor internal, or is in both.
func TestEverySentinelIsListed(t *testing.T) {
	declared := map[string]bool{}
	for _, dir := range []string{"../cache", "../pool", "../splice"} {
		for _, name := range sentinelNames(t, dir) {
			declared[name] = true
		}
	}
	listed := map[error]int{}
	for _, r := range codes {
		listed[r.err]++
	}
	for _, e := range internal {
		listed[e]++
	}
	var missing []string
	for name := range declared {
		err, ok := sentinels[name]
		switch {
		case !ok:
			missing = append(missing, name+" (and to sentinels in this test)")
		case listed[err] == 0:
			missing = append(missing, name)
		case listed[err] > 1:
			t.Errorf("%s is listed twice", name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("sentinels with no decision in errmap (add each to codes or internal): %s", strings.Join(missing, ", "))
	}
	if len(sentinels) != len(declared) {
		t.Fatalf("this test names %d sentinels, the packages declare %d", len(sentinels), len(declared))
	}
}

// sentinels names every exported Err* variable of cache, pool and splice; the
// test checks it against their parsed source, so it cannot fall behind.
var sentinels = map[string]error{
	"cache.ErrBadConfig":           cache.ErrBadConfig,
	"cache.ErrBadArgument":         cache.ErrBadArgument,
	"cache.ErrUnknownBlock":        cache.ErrUnknownBlock,
	"cache.ErrPinBudget":           cache.ErrPinBudget,
	"cache.ErrTenantQuota":         cache.ErrTenantQuota,
	"cache.ErrBadTTL":              cache.ErrBadTTL,
	"cache.ErrBadPriority":         cache.ErrBadPriority,
	"cache.ErrLocked":              cache.ErrLocked,
	"cache.ErrNotLocked":           cache.ErrNotLocked,
	"cache.ErrPinned":              cache.ErrPinned,
	"cache.ErrLeased":              cache.ErrLeased,
	"cache.ErrUnknownLease":        cache.ErrUnknownLease,
	"cache.ErrCapacity":            cache.ErrCapacity,
	"cache.ErrLeaseExists":         cache.ErrLeaseExists,
	"cache.ErrHashCollision":       cache.ErrHashCollision,
	"cache.ErrNotResident":         cache.ErrNotResident,
	"cache.ErrHasChildren":         cache.ErrHasChildren,
	"cache.ErrTransient":           cache.ErrTransient,
	"cache.ErrUnknownTransition":   cache.ErrUnknownTransition,
	"cache.ErrTransitionCancelled": cache.ErrTransitionCancelled,
	"cache.ErrTransitionOrder":     cache.ErrTransitionOrder,
	"cache.ErrAlreadyResident":     cache.ErrAlreadyResident,
	"cache.ErrSpliceSpan":          cache.ErrSpliceSpan,
	"cache.ErrSpliceOverlap":       cache.ErrSpliceOverlap,
	"cache.ErrSpliceSink":          cache.ErrSpliceSink,
	"cache.ErrSpliceStale":         cache.ErrSpliceStale,
	"pool.ErrFull":                 pool.ErrFull,
	"pool.ErrBadSlot":              pool.ErrBadSlot,
	"pool.ErrDoubleFree":           pool.ErrDoubleFree,
	"pool.ErrNotFound":             pool.ErrNotFound,
	"pool.ErrCorrupt":              pool.ErrCorrupt,
	"pool.ErrPageSize":             pool.ErrPageSize,
	"pool.ErrClosed":               pool.ErrClosed,
	"pool.ErrKey":                  pool.ErrKey,
	"splice.ErrUnsupported":        splice.ErrUnsupported,
	"splice.ErrUnknownSession":     splice.ErrUnknownSession,
	"splice.ErrNoDevice":           splice.ErrNoDevice,
	"splice.ErrCapacity":           splice.ErrCapacity,
	"splice.ErrFill":               splice.ErrFill,
	"splice.ErrRecompute":          splice.ErrRecompute,
}

// sentinelNames returns "pkg.ErrX" for each exported Err* var in dir's
// non-test files.
func sentinelNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for pkgName, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				names = append(names, errVars(pkgName, d)...)
			}
		}
	}
	return names
}

func errVars(pkg string, d ast.Decl) []string {
	g, ok := d.(*ast.GenDecl)
	if !ok || g.Tok != token.VAR {
		return nil
	}
	var names []string
	for _, s := range g.Specs {
		for _, n := range s.(*ast.ValueSpec).Names {
			if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
				names = append(names, pkg+"."+n.Name)
			}
		}
	}
	return names
}

// TestInternalSentinelsReadAsInternal checks the other list: a sentinel a
// client cannot cause is internal, wrapped or not.
func TestInternalSentinelsReadAsInternal(t *testing.T) {
	for _, err := range internal {
		if got := Code(fmt.Errorf("x: %w", err)); got != errcode.Internal {
			t.Errorf("%v: %s, want internal", err, got)
		}
	}
}
