//go:build invariants

package main

// invariantsOn: the index checks itself after every step in this build,
// which makes the index benchmark's workloads take minutes.
const invariantsOn = true
