//go:build !invariants

package main

const invariantsOn = false
