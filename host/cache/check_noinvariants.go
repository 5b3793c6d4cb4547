//go:build !invariants

package cache

// afterMutation is a no-op without the invariants build tag.
func (ix *Index) afterMutation() {}

// invariantsOn reports whether the build checks invariants on every step.
const invariantsOn = false
