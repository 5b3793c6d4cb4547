package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/kernels/rope"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// registration is one engine's attachment to the pools.
type registration struct {
	id       string
	engineID string
	uid      int
	layout   *layout.Layout
	rope     *rope.Rotary // nil without a RoPE slice
	ropeCfg  rope.Config
	mode     Mode
	// recompute: the engine serves sparse fill orders and ranks a
	// splice's kept tokens (RegisterRequest.recompute).
	recompute bool
	// parts: how many processes write each page (RegisterArgs.Parts, 1 at least).
	parts   int
	created time.Time
}

// Registration is what the service knows about the live registration.
type Registration struct {
	ID       string
	EngineID string
	Layout   *layout.Layout
	// Rotary is the model's RoPE (nil for a layout without a rotary slice):
	// what splice rotates keys with; RopeConfig is its config.
	Rotary     *rope.Rotary
	RopeConfig rope.Config
	// Mode is arena or connector (mode.go).
	Mode Mode
	// Recompute: the engine recomputes a splice's kept tokens (sparse fill
	// orders with candidates it ranks).
	Recompute bool
	// Parts is how many processes write each page (parts.go).
	Parts int
}

func (r *registration) public() Registration {
	return Registration{ID: r.id, EngineID: r.engineID, Layout: r.layout.Clone(), Rotary: r.rope, RopeConfig: r.ropeCfg, Mode: r.mode,
		Recompute: r.recompute, Parts: r.parts}
}

// Registration returns the live registration, if any.
func (s *Service) Registration() (Registration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reg == nil {
		return Registration{}, false
	}
	return s.reg.public(), true
}

// Live reports whether id is the live registration.
func (s *Service) Live(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg != nil && s.reg.id == id
}

// Pools returns the open pools (nil before the first registration when the
// host has no configured model).
func (s *Service) Pools() *Pools { return s.currentPools() }

// RegisterArgs is an engine's registration, checked by the caller as far
// as its own form goes (a valid layout, RoPE config and mode).
type RegisterArgs struct {
	EngineID string
	// UID is the registering process's uid (-1: unknown).
	UID    int
	Layout *layout.Layout
	Rope   rope.Config
	Rotary *rope.Rotary
	Mode   Mode
	// Reset forgets the cached pages (and allows another layout).
	Reset bool
	// Recompute: the engine serves sparse fill orders and ranks a splice's
	// kept tokens for recompute.
	Recompute bool
	// Parts: how many processes of a connector-mode engine write each
	// page, each its slice (parts.go); 0 or 1: one writes whole pages.
	Parts int
}

// Registered answers a registration.
type Registered struct {
	Registration
	// Pools are the pools the registration uses.
	Pools *Pools
	// Reattached: the pools (and, unless reset, their pages) stayed from
	// before. Joined: another process of the live connector-mode engine
	// joined its registration.
	Reattached, Joined bool
	// CachedPages is how many pages the index holds.
	CachedPages int
}

// Register registers an engine, retiring the previous registration and its
// requests, or joins a process of the live connector-mode engine to its
// registration. Config.OnRegister runs before it returns.
func (s *Service) Register(ctx context.Context, a RegisterArgs) (Registered, error) {
	out, err := s.register(a)
	if err != nil {
		return Registered{}, err
	}
	// The host attaches what depends on the layout (the splicer) before
	// the engine can send a request under the new registration. A process
	// joining its engine's registration finds all of it in place.
	if f := s.cfg.OnRegister; f != nil && !out.Joined {
		f(out.Registration, out.Pools)
	}
	return out, nil
}

func (s *Service) register(a RegisterArgs) (Registered, error) {
	l := a.Layout
	if ps := s.cfg.Index.PageSize(); l.PageSize != ps {
		return Registered{}, errcode.New(errcode.InvalidLayout, "page_size %d: this host's index pages are %d tokens (index.page_size)", l.PageSize, ps)
	}
	parts, err := checkParts(a.Mode, a.Parts)
	if err != nil {
		return Registered{}, err
	}
	if f := s.cfg.CheckRecompute; f != nil {
		if err := f(a.Mode, a.Recompute); err != nil {
			return Registered{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.joinable(a.Mode, a.EngineID, uint64(l.Fingerprint()), a.Reset) && s.reg.ropeCfg == a.Rope && s.reg.parts == parts {
		s.stats.Registrations++
		s.cfg.Log.Info("engine process joined its registration", "engine_id", s.reg.engineID, "registration", s.reg.id, "uid", a.UID)
		return s.registeredLocked(true, true), nil
	}
	if a.Mode == ModeConnector {
		if err := s.checkConnector(s.pools); err != nil {
			return Registered{}, err
		}
	}
	reattached := false
	if s.pools != nil {
		same := s.pools.Layout.Fingerprint() == l.Fingerprint() && (s.reg == nil || s.reg.ropeCfg == a.Rope)
		switch {
		case same:
			reattached = true
		case s.cfg.Pools != nil:
			return Registered{}, errcode.New(errcode.LayoutConflict, "the host's configured model is %s (fingerprint %s); this engine registered %s (%s): change the config's model section or remove it",
				s.pools.Layout, s.pools.Layout.Fingerprint(), l, l.Fingerprint())
		default:
			if pages := s.cachedPages(); pages > 0 && !a.Reset {
				return Registered{}, errcode.New(errcode.LayoutConflict, "%d pages are cached for %s (fingerprint %s); register that layout, or set reset to forget them",
					pages, s.pools.Layout, s.pools.Layout.Fingerprint())
			}
		}
	}
	s.retireLocked("the engine registered again")
	if s.pools != nil && !reattached {
		// A different layout with nothing to keep (or a reset): forget the
		// index's pages and reopen the pools for the new shape.
		s.resetLocked()
	} else if reattached && a.Reset {
		var n int
		s.cfg.Index.Do(func(ix *cache.Index) { n = ix.Reset() })
		s.cfg.Log.Info("registration reset the cache", "pages", n)
	}
	if s.pools == nil {
		octx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p, err := s.cfg.OpenPools(octx, l, a.Mode)
		cancel()
		if err != nil {
			if e, ok := errcode.As(err); ok {
				// A code the host gave (misconfigured: sizes or paths the
				// operator must fix) stays; the rest may pass.
				e.Detail = fmt.Sprintf("open pools for %s: %s", l, e.Detail)
				return Registered{}, e
			}
			return Registered{}, errcode.Wrap(errcode.Unavailable, err, "open pools for %s", l)
		}
		s.pools = p
	}
	if a.Mode == ModeConnector {
		if err := s.checkConnector(s.pools); err != nil {
			return Registered{}, err // pools configured at start with a GPU arena
		}
	}
	reg := &registration{id: randomID(12), engineID: a.EngineID, uid: a.UID, layout: l, rope: a.Rotary, ropeCfg: a.Rope, mode: a.Mode,
		recompute: a.Recompute, parts: parts, created: s.cfg.Now()}
	s.reg = reg
	s.stats.Registrations++
	s.cfg.Log.Info("engine registered", "engine_id", reg.engineID, "registration", reg.id, "mode", a.Mode, "layout", l.String(),
		"fingerprint", l.Fingerprint(), "reattached", reattached, "uid", a.UID, "recompute", a.Recompute, "parts", parts)
	return s.registeredLocked(reattached, false), nil
}

// registeredLocked answers a registration with the live one and its pools.
func (s *Service) registeredLocked(reattached, joined bool) Registered {
	return Registered{Registration: s.reg.public(), Pools: s.pools, Reattached: reattached, Joined: joined, CachedPages: s.cachedPages()}
}

func (s *Service) cachedPages() (n int) {
	s.cfg.Index.Do(func(ix *cache.Index) { n = ix.Stats().Pages })
	return n
}

// resetLocked forgets every cached page and closes the service's pools so
// that the next registration opens pools of its own layout.
func (s *Service) resetLocked() {
	var n int
	s.cfg.Index.Do(func(ix *cache.Index) { n = ix.Reset() })
	s.SetSplicer(nil)
	if s.pools.Close != nil {
		if f := s.cfg.OnPoolsClose; f != nil {
			f(s.pools)
		}
		if err := s.pools.Close(); err != nil {
			s.cfg.Log.Warn("closing the previous layout's pools", "error", err)
		}
	}
	s.cfg.Log.Info("layout changed: cache reset and pools closed", "pages_forgotten", n, "old", s.pools.Layout.String())
	s.pools = nil
}

// registrationOf checks a call's registration id. Service mutex held.
func (s *Service) registrationOf(id string) (*registration, error) {
	if s.reg == nil || id == "" || s.reg.id != id {
		if id == "" {
			return nil, errcode.New(errcode.MissingField, "registration_id")
		}
		return nil, errcode.New(errcode.UnknownRegistration, "registration %.40q is not live on host boot %s", id, s.bootID)
	}
	return s.reg, nil
}
