//go:build race

package memfd

// raceEnabled turns the streaming-store copy off: the race detector sees
// copy() but not assembly.
const raceEnabled = true
