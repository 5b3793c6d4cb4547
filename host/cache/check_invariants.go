//go:build invariants

package cache

import (
	"runtime"
	"strings"
)

// afterMutation runs the full checker after every mutation in builds with
// the invariants tag, so a broken invariant stops at the step that broke
// it.
func (ix *Index) afterMutation() {
	if err := ix.Check(); err != nil {
		panic("cache index invariant broken: " + err.Error())
	}
	if ix.panicIn != "" && calledFrom(ix.panicIn) {
		method := ix.panicIn
		ix.panicIn = ""
		panic("cache: panic injected after " + method + " (PanicAfterNext)")
	}
}

// PanicAfterNext makes the next call of the index's method (by name: "Pin",
// "Match") that changes the index panic once the change is done, the index
// consistent. A test of a caller's recovery shows with it that a panic while
// the index is held releases the lock, rolls back an open journal and leaves
// the next call served; naming the method keeps the host's background work
// (the mover's steps, the sweep) from taking the panic instead. Invariants
// builds only.
func (ix *Index) PanicAfterNext(method string) { ix.panicIn = method }

// calledFrom reports whether a method of Index named method is on the
// caller's stack.
func calledFrom(method string) bool {
	var pcs [16]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".(*Index)."+method) {
			return true
		}
		if !more {
			return false
		}
	}
}

// invariantsOn reports whether the build checks invariants on every step.
const invariantsOn = true
