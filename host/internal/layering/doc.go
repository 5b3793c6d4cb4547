// Package layering holds the test that keeps the module's imports to the
// layers host/ARCHITECTURE.md lists: a package imports its own layer or a
// lower one, and every package is placed on one. It has no code of its own.
package layering
