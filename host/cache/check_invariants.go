//go:build invariants

package cache

// afterMutation runs the full checker after every mutation in builds with
// the invariants tag, so a broken invariant stops at the step that broke
// it.
func (ix *Index) afterMutation() {
	if err := ix.Check(); err != nil {
		panic("cache index invariant broken: " + err.Error())
	}
}

// invariantsOn reports whether the build checks invariants on every step.
const invariantsOn = true
