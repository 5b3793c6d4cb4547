// Package controlclient is the Go client of a kvpilot host's control plane,
// for routers, harnesses, operator tools (`kvpilot ctl`) and benchmarks. It
// speaks both transports behind one interface:
//
//   - DialUnix: gRPC kvpilot.v1.Control on the host's Unix socket (the
//     caller's uid must be on the host's allow-list);
//
//   - NewNATS / ConnectNATS: the NATS command plane, kv-control-<worker_id>
//     and kv-control-broadcast, with JSON payloads, optionally published
//     through JetStream for durable, deduplicated delivery.
//
//     c, err := controlclient.DialUnix("/var/run/kvpilot/control.sock", controlclient.UnixOptions{})
//     reply, err := c.Apply(ctx, directive.Turn{Directives: []directive.Directive{
//     directive.Cache{BlockHashes: hashes, Pin: true},
//     }})
//
// A refused turn is a reply with Status "error", not a Go error; Go errors
// are transport failures, as *errcode.Error where the host gave a code.
package controlclient

import (
	"context"
	"errors"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Client is a connection to one host's control plane.
type Client interface {
	// Apply sends one turn, applied all or none, and returns the host's
	// answer per directive.
	Apply(ctx context.Context, t directive.Turn) (directive.TurnReply, error)
	// CacheControl sends a router cache_control request for tenant ("" is
	// the default tenant).
	CacheControl(ctx context.Context, c directive.CacheControl, tenant string) (directive.CacheControlReply, error)
	// Stats returns per-tier page counts (Control socket only): host-wide,
	// or, for a uid the host binds to exactly one tenant, that tenant's.
	Stats(ctx context.Context) (Stats, error)
	// TenantStats returns one tenant's per-tier page counts (Control
	// socket only); "" asks for what Stats returns. A uid the host binds
	// to other tenants is refused with permission_denied.
	TenantStats(ctx context.Context, tenant string) (Stats, error)
	// Watch calls fn with each KV event until ctx ends, fn returns an
	// error (ErrStop ends it cleanly) or the host ends the stream.
	Watch(ctx context.Context, o WatchOptions, fn func(Event) error) error
	// Close releases the connection.
	Close() error
}

// ErrStop, returned by a Watch callback, ends the watch with a nil error.
var ErrStop = errors.New("stop watching")

// ErrFellBehind ends a watch whose reader did not keep up: the host keeps a
// bounded buffer per watcher and ends the stream rather than block or skip
// events silently.
var ErrFellBehind = errors.New("watch ended: the watcher fell behind the host's events")

// WatchOptions select events.
type WatchOptions struct {
	// Tiers keeps only events of these tiers (device, host, disk, remote,
	// or their event names); empty keeps all.
	Tiers []string
	// Tenant keeps only this tenant's events (Control socket only: the
	// Dynamo event JSON on NATS carries no tenant).
	Tenant string
	// Ready, when set, is called once the watch is registered: events
	// after it are seen.
	Ready func()
}

// Stats is a host's Stats answer.
type Stats struct {
	WorkerID       string      `json:"worker_id"`
	PageSizeTokens int64       `json:"page_size_tokens"`
	Tiers          []TierStats `json:"tiers"`
	Leases         int64       `json:"leases"`
	Sessions       int64       `json:"sessions"`
	// Tenant is set when the figures are one tenant's: Tiers then count
	// only its pages (capacity stays the tier's), Leases its leases, and
	// the Tenant* fields its pages, distinct pinned pages and pin quota
	// (0: none).
	Tenant            string `json:"tenant,omitempty"`
	TenantPages       int64  `json:"tenant_pages,omitempty"`
	TenantPinnedPages int64  `json:"tenant_pinned_pages,omitempty"`
	TenantPinQuota    int64  `json:"tenant_pin_quota,omitempty"`
	// DegradedLeases are leases whose pages could not be moved to the
	// pause tier (Reason says why): their pages stay evictable, so they
	// may be lost, until a later attempt settles the lease.
	DegradedLeases []DegradedLease `json:"degraded_leases,omitempty"`
	// Pins counts the pins held: pinned paths, a path pinned twice
	// counting twice.
	Pins int64 `json:"pins"`
	// RestorePending is true while the pins and leases saved before a
	// restart wait for an engine to register (the pools open then):
	// Leases and Pins count the saved ones.
	RestorePending bool `json:"restore_pending,omitempty"`
}

// DegradedLease is one line of Stats.DegradedLeases.
type DegradedLease struct {
	LeaseID string `json:"lease_id"`
	Tenant  string `json:"tenant,omitempty"`
	Reason  string `json:"reason"`
}

// TierStats is one tier's line of Stats. Bytes are 0 until an engine has
// registered its layout (the host then knows a page's size).
type TierStats struct {
	Tier          string `json:"tier"`
	Pages         int64  `json:"pages"`
	Bytes         int64  `json:"bytes"`
	CapacityBytes int64  `json:"capacity_bytes"`
	PinnedPages   int64  `json:"pinned_pages"`
	PinnedBytes   int64  `json:"pinned_bytes"`
	LeasedPages   int64  `json:"leased_pages"`
}
