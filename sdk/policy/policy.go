// Package policy is the kvpilot Policy SDK: what a policy plugin author
// writes against.
//
// A policy is plain Go. It implements Policy, and its main function is one
// line:
//
//	func main() { policy.Serve(myPolicy{}) }
//
// The host starts the binary as a separate process. go-plugin's handshake
// (fixed) and gRPC run underneath; the application API version is
// negotiated in Info, so a plugin built against an older SDK keeps working
// as long as the host still speaks one of its versions. The host then calls
// Configure once with the policy's params from the host config, and Observe
// for every observation the policy subscribed to, in order within a session.
// The directives Observe returns are applied by the host's executor as one
// turn, audited under the policy's configured name.
//
// A plugin process must never write to stdout: go-plugin's handshake runs
// over it. Serve hands Logger a hclog logger that writes JSON to stderr,
// which the host folds into its own log.
//
// sdk/policytest runs a policy without a host, for unit tests. The host's
// side of the protocol is in pluginwire; an author never needs it.
package policy

import (
	"context"
	"encoding/json"
)

// APIVersion is the application API version this SDK speaks. It rises only
// when the meaning of the protocol changes; new capabilities arrive as
// optional interfaces instead (see Closer).
const APIVersion uint32 = 1

// Policy is implemented by every policy.
//
// The SDK never calls Observe concurrently with itself or with Configure, so
// a policy may keep plain maps as state. Observations arrive in host order,
// which keeps every session's observations in order.
type Policy interface {
	// Info names the policy and says what it wants to observe.
	Info() Info
	// Configure receives the policy's params (a JSON object, "{}" when the
	// config has none). An error refuses the configuration: the host logs
	// it and does not start the policy.
	Configure(params json.RawMessage) error
	// Observe reacts to one observation. The returned directives are
	// applied together, all or none, under the policy's name. An error is
	// logged and counted by the host; the policy keeps running.
	Observe(ctx context.Context, obs Observation) ([]Directive, error)
}

// Info describes a policy.
type Info struct {
	// Name is the policy's own name (the host's config may run several
	// instances of it under other names).
	Name    string
	Version string
	// APIVersions lists the application API versions the policy speaks;
	// empty means just APIVersion.
	APIVersions []uint32
	// Subscriptions lists the observation kinds to deliver; the host
	// delivers nothing else.
	Subscriptions []Kind
}

// Closer is an optional interface: Close is called when the host stops the
// plugin (a hot-swap, or host shutdown), to flush whatever the policy holds.
type Closer interface {
	Close() error
}
