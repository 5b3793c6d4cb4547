//go:build invariants

package cachebench_test

// invariantsOn: the index checks itself after every step in this build,
// which makes timings meaningless.
const invariantsOn = true
