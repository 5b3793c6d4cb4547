// Package directive is kvpilot's directive vocabulary: the Go types for every
// verb a router, harness, operator or policy can send,
// their JSON wire format, and their validation.
//
// There are three families:
//
//   - block verbs, in the seed AgenticCommand format (JSON tagged by "type"):
//     Warm, Prune, Cache, Think, Pause, RenewLease, RevokeLease;
//   - span verbs in the same style, naming token positions of a session's
//     cached sequence: Splice, Pin, Retain, Evict, Resume, Share;
//   - the router's cache_control request (CacheControl) with its reply.
//
// Directives travel in a Turn, which the host applies all or none. Every
// rejection is an *errcode.Error, so clients can switch on a stable code.
//
// The package imports nothing from host/: plugins and clients build on it.
package directive

// Verb names a directive kind. Its value is the wire "type" tag.
type Verb string

// Directive is one instruction about the cache. The concrete types are the
// value types in this package (Warm, Prune, ..., Share); the unexported
// method keeps the set closed so switches over it stay exhaustive.
type Directive interface {
	Verb() Verb
	// Validate checks the directive on its own against the limits; turn-level
	// rules (overlap) are ValidateTurn's.
	Validate(l Limits) error
	isDirective()
}

// Mode says how an edit is executed.
type Mode string

const (
	// ModeDefault leaves the choice to the host's configuration.
	ModeDefault Mode = ""
	// ModeAmortize keeps downstream pages and re-rotates them by Δ.
	ModeAmortize Mode = "amortize"
	// ModeForget truncates the branch at the span start.
	ModeForget Mode = "forget"
)

// Scope says who may reuse a shared prefix.
type Scope string

const (
	// ScopeTenant shares with other workers, for the same tenant only (the default).
	ScopeTenant Scope = "tenant"
	// ScopeGlobal shares with every tenant: for public prefixes such as a common system prompt.
	ScopeGlobal Scope = "global"
)

// ModeOf returns the verb's mode, for the audit log: the edit mode of
// Splice and Evict, "pin"/"unpin" for Cache, "mark"/"purge" for Think, and
// "" otherwise.
func ModeOf(d Directive) string {
	switch d := d.(type) {
	case Splice:
		return string(d.Mode)
	case Evict:
		return string(d.Mode)
	case Cache:
		if d.Pin {
			return "pin"
		}
		return "unpin"
	case Think:
		if d.Transient {
			return "mark"
		}
		return "purge"
	}
	return ""
}
