// Package scenario holds the end-to-end benchmark scenarios that `kvpilot
// bench` runs: a real host with the reference engine registered (Rig),
// agent traces resent through it, and reports printed as a table, JSON or
// an SVG plot. It sits under host/bench with the other harnesses, outside
// the core packages; the kvpilot-bench command links it, and so does
// examples/demo (the traces and the front door's chat client), while the
// production binary carries none of it.
package scenario
