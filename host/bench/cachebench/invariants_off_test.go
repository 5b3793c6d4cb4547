//go:build !invariants

package cachebench_test

const invariantsOn = false
