package engine

import (
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Mode says who owns the device KV memory of a registration.
//
// In arena mode (the reference engine, an engine patched to allocate through
// kvpilot) the host allocates every tier and the engine computes in the
// device arena: every directive edits every tier in place.
//
// In connector mode (vLLM's KV connector, SGLang's HiCache later) the engine
// keeps its own device memory. The host's device tier is then a staging
// arena in shared memory: the connector copies a matched page from its
// staging slot into the engine's paged KV, and a page the engine computed
// from the engine into an allocated staging slot before Commit. What it
// means for the rest of the host:
//
//   - staged pages are written through to the host tier like any device
//     page, so a staging slot can always be evicted; a write policy of none
//     is refused, since it would drop every page the engine saved;
//   - the staging tier is never announced: the engine announces its own
//     device blocks, and kvpilot only the tiers it owns (host, disk, remote);
//   - directives act on kvpilot's copies. Pin, retain, pause, warm, prune
//     and think keep their meaning there; none of them reaches the pages in
//     the engine's own memory, which its own allocator evicts as it likes.
//     A splice rotates kvpilot's copies and commits the new branch under its
//     new hashes, so the engine's next prefix lookup through the connector
//     finds the spliced sequence. vLLM's connector API serves no fill
//     orders, so the splicer plans none (the branch ends before the
//     replacement) unless the edited sequence's pages through the
//     replacement are already cached: the front door has vLLM prefill
//     them with a request of its own first, and the splice adopts them
//     (host/gateway, prefill.go);
//   - the processes of one engine (vLLM's scheduler and its workers) each
//     register with the same engine_id and layout, and share one
//     registration: the second joins the first instead of retiring it, and
//     gets a descriptor claim of its own.
type Mode uint8

const (
	ModeArena Mode = iota + 1
	ModeConnector
)

func (m Mode) String() string {
	switch m {
	case ModeArena:
		return "arena"
	case ModeConnector:
		return "connector"
	}
	return "invalid"
}

// checkConnector refuses a connector registration the host cannot
// stage pages for: a device pool that is not shared memory, or a write
// policy that keeps no copy of what the engine saves. p may be nil (pools
// not open yet: they will open as a staging arena).
func (s *Service) checkConnector(p *Pools) error {
	if s.cfg.Index.Config().DeviceWrite == cache.WriteNone {
		return errcode.New(errcode.LayoutConflict,
			"connector mode stages the engine's pages through the device tier and keeps them in the host tier: set index.write_policy to write-through (or write-back) on this host")
	}
	if p == nil {
		return nil
	}
	if m := p.Set.Memory(tier.Device); m != nil && m.Handle().Kind != pool.HandleMemfd {
		return errcode.New(errcode.LayoutConflict,
			"connector mode stages pages through shared memory, and this host's device tier is GPU memory: set pools.device_backend: memfd on this host (or register in arena mode)")
	}
	return nil
}

// joinable reports whether a connector registration names the live
// registration's engine and layout, so it joins it (another process of the
// same engine) instead of replacing it.
func (s *Service) joinable(mode Mode, engineID string, fingerprint uint64, reset bool) bool {
	r := s.reg
	return mode == ModeConnector && r != nil && r.mode == ModeConnector && engineID != "" &&
		r.engineID == engineID && uint64(r.layout.Fingerprint()) == fingerprint && !reset
}
