// Package cache is kvpilot's cache index: the deterministic core of the host
// that knows, for every cached KV page, where it lives, who may evict it and
// what each directive does to it.
//
// The index is a radix tree of full pages. A page is keyed under its parent
// by its local hash and identified by its sequence hash; each tenant has its
// own root and its own sequence-hash map, so tenants never see each other's
// pages even when hashes collide. Every page records its residency on the
// four tiers (with an opaque location per tier that the pools assign),
// lock_ref, pins, retention, the transient flag, leases and its last access.
//
// The index does no I/O, starts no goroutines and never reads the wall
// clock: time comes from an injected Clock. Tier moves are expressed as
// Transitions that Plan (and PlanFetch) return; the mover executes them and
// reports back with CompleteCopy, CompleteDrop or FailTransition. Residency
// changes, and events are emitted, only then. Operations that free pages on
// the index's own authority (prune, purge, revoke) remove them at once and
// return the slots the caller must free; so does LoseCopy, which records
// that a copy is gone (a store found it corrupt) together with the copies
// of its descendants on that tier.
//
// Invariants kept at every step (Check verifies them; with the `invariants`
// build tag every mutation runs Check and panics on a violation):
//   - per tier, the resident pages are prefix-closed: a page resident on a
//     tier has its parent resident there too, so a page is matchable and
//     loadable wherever it is, and eviction takes tier leaves only;
//   - a page in the index is resident on at least one tier;
//   - the last copy of a pinned, locked or leased page is never dropped
//     (a degraded lease, whose pages could not reach its tier, no longer
//     holds them: lease_health.go)
//     (LoseCopy does not drop: it records a loss, and counts it);
//   - distinct pinned pages never exceed any tier's pin budget, nor a
//     tenant's quota.
//
// An Index is not safe for concurrent use: the host serializes calls with
// one mutex, which keeps every operation a plain in-memory step.
package cache

import (
	"fmt"
	"math"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

// WritePolicy says how device pages reach the host tier.
type WritePolicy uint8

const (
	// WriteThrough copies every committed device page to the host tier at
	// once, so device eviction normally drops a page that has a host copy.
	WriteThrough WritePolicy = iota
	// WriteBack copies a device page to the host only when it is evicted.
	WriteBack
	// WriteNone drops evicted device pages (pinned pages are still demoted).
	WriteNone
)

var writePolicyNames = [...]string{"write-through", "write-back", "none"}

func (p WritePolicy) String() string {
	if int(p) < len(writePolicyNames) {
		return writePolicyNames[p]
	}
	return fmt.Sprintf("WritePolicy(%d)", uint8(p))
}

// ParseWritePolicy accepts write-through, write-back or none.
func ParseWritePolicy(s string) (WritePolicy, error) {
	for i, n := range writePolicyNames {
		if s == n {
			return WritePolicy(i), nil
		}
	}
	return 0, fmt.Errorf("write policy %q: want write-through, write-back or none: %w", s, ErrBadConfig)
}

// TierConfig sizes one tier in pages.
type TierConfig struct {
	// Capacity in pages; 0 means the tier is absent: nothing is copied to
	// it and it does not bound pins.
	Capacity int
	// High and Low are watermarks as fractions of Capacity: Plan starts
	// evicting when usage exceeds High and stops at Low.
	High, Low float64
	// PinFraction is the largest fraction of Capacity that pinned pages may
	// take.
	PinFraction float64
}

// Config configures an Index.
type Config struct {
	// PageSize is the number of tokens per page.
	PageSize int
	// Tiers is indexed by tier.Tier.
	Tiers [tier.Count]TierConfig
	// DeviceWrite is the device tier's write policy.
	DeviceWrite WritePolicy
	// TenantPinQuota caps each tenant's pinned pages; 0 means no quota.
	// TenantQuotas overrides it per tenant.
	TenantPinQuota int
	TenantQuotas   map[string]int
	// Clock is required.
	Clock Clock
	// OnEvent, when set, receives every event synchronously instead of the
	// internal buffer that DrainEvents empties. It must not call the index.
	OnEvent func(Event)
	// Namespace maps a tenant to its cache namespace: the partition its
	// pages live in and the salt of their hashes. Tenants
	// mapped to one namespace share its pages, pins and quota. Nil: each
	// tenant is its own namespace. It must be idempotent (a namespace maps
	// to itself), because the index reports pages by namespace and callers
	// hand those names back.
	Namespace func(tenant string) string
}

func (c *Config) validate() error {
	if c.PageSize <= 0 {
		return fmt.Errorf("page size %d must be positive: %w", c.PageSize, ErrBadConfig)
	}
	if c.Clock == nil {
		return fmt.Errorf("clock is required: %w", ErrBadConfig)
	}
	if c.DeviceWrite > WriteNone {
		return fmt.Errorf("device write policy %d: %w", c.DeviceWrite, ErrBadConfig)
	}
	if c.TenantPinQuota < 0 {
		return fmt.Errorf("tenant pin quota %d must not be negative: %w", c.TenantPinQuota, ErrBadConfig)
	}
	for name, q := range c.TenantQuotas {
		if q < 0 {
			return fmt.Errorf("pin quota of tenant %q is %d, must not be negative: %w", name, q, ErrBadConfig)
		}
	}
	for _, t := range tier.All {
		tc := c.Tiers[t]
		bad := func(what string, v float64) error {
			return fmt.Errorf("tier %s: %s %v must be within [0, 1]: %w", t, what, v, ErrBadConfig)
		}
		switch {
		case tc.Capacity < 0:
			return fmt.Errorf("tier %s: capacity %d must not be negative: %w", t, tc.Capacity, ErrBadConfig)
		case !(tc.High >= 0 && tc.High <= 1):
			return bad("high watermark", tc.High)
		case !(tc.Low >= 0 && tc.Low <= 1):
			return bad("low watermark", tc.Low)
		case !(tc.PinFraction >= 0 && tc.PinFraction <= 1):
			return bad("pin fraction", tc.PinFraction)
		case tc.Low > tc.High:
			return fmt.Errorf("tier %s: low watermark %v above high %v: %w", t, tc.Low, tc.High, ErrBadConfig)
		}
	}
	return nil
}

// Index is the cache index. See the package doc for its rules.
type Index struct {
	cfg   Config
	clock Clock

	tenants map[string]*tenantState

	// resident counts pages per tier; pendingIn and pendingDrop count live
	// transitions so Plan sees the usage that will be.
	resident    [tier.Count]int
	pendingIn   [tier.Count]int
	pendingDrop [tier.Count]int
	// reserved counts slots handed out but not committed (Reserve); they
	// count as used, so eviction makes room for them. Reset keeps them:
	// they belong to running requests, not to cached pages.
	reserved [tier.Count]int

	// pinned is an intrusive list of pages whose pin count is positive
	// (expired or not), so Sweep and Stats never scan the whole tree.
	pinnedHead  *node
	pinnedPages int
	// pinBudget is the least budget over present tiers: a pinned page may
	// have to live on any of them (loaded back to device, demoted to host),
	// so bounding distinct pinned pages by each keeps every budget whatever
	// the mover does. math.MaxInt when no tier bounds pins.
	pinBudget     int
	pinBudgetTier tier.Tier

	// jr records reversible changes while a caller's journal is open.
	jr journal
	// panicIn names the method whose next change panics once it is done
	// (invariants builds only: PanicAfterNext).
	panicIn string

	leases     map[string]*lease
	leaseOrder []*lease // creation order, so Plan is deterministic
	leaseSeq   uint64

	// roomWant counts, per tier, the pages this Plan's copies (a lease's
	// pause, a pin's disk copy, a write-through) could not place there for
	// want of room, so that tier's eviction makes it; starved lists those
	// leases (lease_health.go).
	roomWant [tier.Count]int
	starved  []*lease
	// pinsDirty: some pinned page may lack its disk copy (pin_durable.go);
	// pin copies back off until pinRetryAt after pinFailures failures.
	pinsDirty   bool
	pinFailures int
	pinRetryAt  time.Duration

	inflight map[uint64]*pending
	nextID   uint64

	// wtQueue holds device pages waiting for their write-through copy.
	wtQueue []*node
	// requeue is cancelDependents' scratch list of cancelled write-throughs.
	requeue []*pending

	events []Event

	// epoch marks nodes visited by the current operation (dedup without
	// allocation); see node.mark.
	epoch uint32

	// Scratch buffers reused by hot paths.
	hashes  blockid.Hashes
	nodes   []*node
	closure []*node
	alt     []*node
}

type tenantState struct {
	name   string
	root   node // sentinel: never resident, never in bySeq
	bySeq  map[uint64]*node
	pinned int // pages of this tenant with a positive pin count
	quota  int // 0: none
}

// New returns an empty index.
func New(cfg Config) (*Index, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ix := &Index{
		cfg:       cfg,
		clock:     cfg.Clock,
		tenants:   make(map[string]*tenantState),
		leases:    make(map[string]*lease),
		inflight:  make(map[uint64]*pending),
		pinBudget: math.MaxInt,
	}
	for _, t := range tier.All {
		tc := cfg.Tiers[t]
		if tc.Capacity == 0 {
			continue
		}
		if b := int(tc.PinFraction * float64(tc.Capacity)); b < ix.pinBudget {
			ix.pinBudget, ix.pinBudgetTier = b, t
		}
	}
	return ix, nil
}

// PageSize returns the configured page size in tokens.
func (ix *Index) PageSize() int { return ix.cfg.PageSize }

// Config returns the configuration the index was built with.
func (ix *Index) Config() Config { return ix.cfg }

// Namespace returns the cache namespace of tenant: the name the index
// reports its pages under (Event.Tenant, Freed.Tenant and the like), which
// is also what pool keys use.
func (ix *Index) Namespace(tenant string) string {
	if ix.cfg.Namespace == nil {
		return tenant
	}
	return ix.cfg.Namespace(tenant)
}

// Salt returns the hashing salt of tenant's pages: its namespace. Every
// caller that hashes tokens for the index (engine, executor, splicer) must
// use it, or it names pages the index never stored.
func (ix *Index) Salt(tenant string) blockid.Salt {
	return blockid.Salt{Namespace: ix.Namespace(tenant)}
}

func (ix *Index) tenant(name string) *tenantState { return ix.tenants[ix.Namespace(name)] }

func (ix *Index) tenantOrCreate(name string) *tenantState {
	name = ix.Namespace(name)
	ts := ix.tenants[name]
	if ts == nil {
		ts = &tenantState{name: name, bySeq: make(map[uint64]*node), quota: ix.cfg.TenantPinQuota}
		if q, ok := ix.cfg.TenantQuotas[name]; ok {
			ts.quota = q
		}
		ts.root.tenant = ts
		ts.root.isRoot = true
		ix.tenants[name] = ts
	}
	return ts
}

// nextEpoch starts a new dedup generation; see node.mark.
func (ix *Index) nextEpoch() uint32 {
	ix.epoch++
	if ix.epoch == 0 { // wrapped: clear every mark so stale ones cannot match
		for _, ts := range ix.tenants {
			for _, n := range ts.bySeq {
				n.mark = 0
			}
		}
		ix.epoch = 1
	}
	return ix.epoch
}

func (ix *Index) present(t tier.Tier) bool { return ix.cfg.Tiers[t].Capacity > 0 }
