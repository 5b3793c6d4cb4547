//go:build !race

package memfd

const raceEnabled = false
