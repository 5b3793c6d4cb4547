package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/rpcpeer"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/kernels/rope"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// APIVersion is the protocol version this host speaks.
const APIVersion = uint32(pb.EngineApiVersion_ENGINE_API_VERSION_1)

// registration is one engine's attachment to the pools.
type registration struct {
	id       string
	engineID string
	uid      int
	layout   *layout.Layout
	rope     *rope.Rotary // nil without a RoPE slice
	ropeCfg  rope.Config
	mode     Mode
	created  time.Time
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
}

// Registration returns the live registration, if any.
func (s *Service) Registration() (Registration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reg == nil {
		return Registration{}, false
	}
	return Registration{ID: s.reg.id, EngineID: s.reg.engineID, Layout: s.reg.layout.Clone(), Rotary: s.reg.rope, RopeConfig: s.reg.ropeCfg, Mode: s.reg.mode}, true
}

// Pools returns the open pools (nil before the first registration when the
// host has no configured model).
func (s *Service) Pools() *Pools { return s.currentPools() }

// Register implements kvpilot.v1.Engine.
func (s *Service) Register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	resp, err := s.register(ctx, req)
	if err != nil {
		s.cfg.Log.Warn("registration refused", "engine_id", req.GetEngineId(), "error", err)
		return nil, convert.GRPCStatus(errcode.From(err))
	}
	// The host attaches what depends on the layout (the splicer) before
	// the engine can send a request under the new registration.
	// A process joining its engine's registration finds all of it in place.
	if f := s.cfg.OnRegister; f != nil && !resp.Joined {
		if reg, ok := s.Registration(); ok && reg.ID == resp.RegistrationId {
			f(reg, s.currentPools())
		}
	}
	return resp, nil
}

func (s *Service) register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	if v := req.GetApiVersion(); v != APIVersion {
		return nil, errcode.New(errcode.BadRequest, "api_version %d: this host speaks %d", v, APIVersion)
	}
	if id := req.GetEngineId(); len(id) > 128 || !printable(id) {
		return nil, errcode.New(errcode.BadRequest, "engine_id must be at most 128 printable characters")
	}
	mode, err := modeFromProto(req.GetMode())
	if err != nil {
		return nil, err
	}
	l, rcfg, rot, err := layoutFromProto(req)
	if err != nil {
		return nil, err
	}
	if ps := s.cfg.Index.PageSize(); l.PageSize != ps {
		return nil, errcode.New(errcode.InvalidLayout, "page_size %d: this host's index pages are %d tokens (index.page_size)", l.PageSize, ps)
	}
	uid := -1
	if p, ok := rpcpeer.Of(ctx); ok {
		uid = p.UID
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.joinable(mode, req.GetEngineId(), uint64(l.Fingerprint()), req.GetResetCache()) && s.reg.ropeCfg == rcfg {
		return s.joinLocked(uid), nil
	}
	if mode == ModeConnector {
		if err := s.checkConnectorLocked(s.pools); err != nil {
			return nil, err
		}
	}
	reattached := false
	if s.pools != nil {
		same := s.pools.Layout.Fingerprint() == l.Fingerprint() && (s.reg == nil || s.reg.ropeCfg == rcfg)
		switch {
		case same:
			reattached = true
		case s.cfg.Pools != nil:
			return nil, errcode.New(errcode.LayoutConflict, "the host's configured model is %s (fingerprint %s); this engine registered %s (%s): change the config's model section or remove it",
				s.pools.Layout, s.pools.Layout.Fingerprint(), l, l.Fingerprint())
		default:
			if pages := s.cachedPages(); pages > 0 && !req.GetResetCache() {
				return nil, errcode.New(errcode.LayoutConflict, "%d pages are cached for %s (fingerprint %s); register that layout, or set reset to forget them",
					pages, s.pools.Layout, s.pools.Layout.Fingerprint())
			}
		}
	}
	s.retireLocked("the engine registered again")
	if s.pools != nil && !reattached {
		// A different layout with nothing to keep (or a reset): forget the
		// index's pages and reopen the pools for the new shape.
		s.resetLocked()
	} else if reattached && req.GetResetCache() {
		var n int
		s.cfg.Index.Do(func(ix *cache.Index) { n = ix.Reset() })
		s.cfg.Log.Info("registration reset the cache", "pages", n)
	}
	if s.pools == nil {
		octx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p, err := s.cfg.OpenPools(octx, l, mode)
		cancel()
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "open pools for %s", l)
		}
		s.pools = p
	}
	if mode == ModeConnector {
		if err := s.checkConnectorLocked(s.pools); err != nil {
			return nil, err // pools configured at start with a GPU arena
		}
	}
	reg := &registration{id: randomID(12), engineID: req.GetEngineId(), uid: uid, layout: l, rope: rot, ropeCfg: rcfg, mode: mode, created: s.cfg.Now()}
	s.reg = reg
	s.stats.Registrations++
	s.cfg.Log.Info("engine registered", "engine_id", reg.engineID, "registration", reg.id, "mode", mode, "layout", l.String(),
		"fingerprint", l.Fingerprint(), "reattached", reattached, "uid", uid)
	resp := s.responseLocked(uid)
	resp.Reattached = reattached
	return resp, nil
}

// joinLocked lets another process of the live connector-mode engine share
// its registration: same id, pools and requests, and a descriptor claim of
// its own.
func (s *Service) joinLocked(uid int) *pb.RegisterResponse {
	s.stats.Registrations++
	s.cfg.Log.Info("engine process joined its registration", "engine_id", s.reg.engineID, "registration", s.reg.id, "uid", uid)
	resp := s.responseLocked(uid)
	resp.Reattached, resp.Joined = true, true
	return resp
}

// responseLocked answers a registration with the live registration's pools
// and a fresh descriptor token for uid.
func (s *Service) responseLocked(uid int) *pb.RegisterResponse {
	reg, l := s.reg, s.reg.layout
	handles, fds := poolHandles(s.pools, reg.mode)
	return &pb.RegisterResponse{
		RegistrationId:    reg.id,
		BootId:            s.bootID,
		WorkerId:          s.cfg.WorkerID,
		LayoutFingerprint: uint64(l.Fingerprint()),
		PageSize:          uint32(l.PageSize),
		PageBytes:         uint64(l.PageBytes()),
		Pools:             handles,
		FdSocket:          s.cfg.FDSocket,
		FdToken:           s.fds.offer(reg.id, uid, fds),
		ApiVersion:        APIVersion,
		CachedPages:       uint64(s.cachedPages()),
		Mode:              reg.mode.proto(),
	}
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

// registrationOf checks a call's registration id.
func (s *Service) registrationOf(id string) (*registration, error) {
	if s.reg == nil || id == "" || s.reg.id != id {
		if id == "" {
			return nil, errcode.New(errcode.MissingField, "registration_id")
		}
		return nil, errcode.New(errcode.UnknownRegistration, "registration %.40q is not live on host boot %s", id, s.bootID)
	}
	return s.reg, nil
}

// poolHandles describes the memory pools for the engine, and lists the
// memfd descriptors in the order the side channel sends them.
func poolHandles(p *Pools, mode Mode) ([]*pb.PoolHandle, []int) {
	var out []*pb.PoolHandle
	var fds []int
	for _, t := range []tier.Tier{tier.Device, tier.Host} {
		m := p.Set.Memory(t)
		if m == nil {
			continue
		}
		h := m.Handle()
		ph := &pb.PoolHandle{
			Tier:          tierToProto(t),
			SizeBytes:     uint64(h.Size),
			Slots:         uint32(h.Slots),
			Arrangement:   h.Arrangement.String(),
			Pinned:        h.Pinned,
			DeviceOrdinal: -1,
			Staging:       t == tier.Device && mode == ModeConnector,
		}
		switch h.Kind {
		case pool.HandleMemfd:
			ph.Kind = "memfd"
			fds = append(fds, h.FD)
		case pool.HandleCUDAIPC:
			ph.Kind = "cuda_ipc"
			ph.CudaIpc = append([]byte(nil), h.IPC...)
			ph.DeviceOrdinal = int32(p.DeviceOrdinal)
		}
		out = append(out, ph)
	}
	return out, fds
}

func tierToProto(t tier.Tier) pb.Tier {
	return pb.Tier(int(t) + 1)
}

// layoutFromProto validates a registration's layout and RoPE config.
func layoutFromProto(req *pb.RegisterRequest) (*layout.Layout, rope.Config, *rope.Rotary, error) {
	bad := func(format string, args ...any) (*layout.Layout, rope.Config, *rope.Rotary, error) {
		return nil, rope.Config{}, nil, errcode.New(errcode.InvalidLayout, format, args...)
	}
	dt, err := layout.ParseDType(req.GetDtype())
	if err != nil {
		return bad("dtype: %v", err)
	}
	if len(req.GetBuffers()) > layout.MaxBuffers {
		return bad("%d buffers, at most %d", len(req.GetBuffers()), layout.MaxBuffers)
	}
	l := &layout.Layout{Model: req.GetModel(), PageSize: int(req.GetPageSize()), DType: dt, Layers: int(req.GetLayers())}
	for _, b := range req.GetBuffers() {
		l.Buffers = append(l.Buffers, layout.Buffer{Name: b.GetName(), Heads: int(b.GetHeads()), HeadDim: int(b.GetHeadDim())})
	}
	var rcfg rope.Config
	var rot *rope.Rotary
	if rs := req.GetRopeSlice(); rs != nil {
		style, err := layout.ParseRopeStyle(rs.GetStyle())
		if err != nil {
			return bad("rope_slice.style: %v", err)
		}
		l.Rope = &layout.RopeSlice{Buffer: int(rs.GetBuffer()), Offset: int(rs.GetOffset()), Dim: int(rs.GetDim()), Style: style}
		if err := l.Validate(); err != nil {
			return bad("%v", err)
		}
		rcfg, err = ropeFromProto(req.GetRope(), l.Rope)
		if err != nil {
			return bad("rope: %v", err)
		}
		if rot, err = rope.New(rcfg); err != nil {
			return bad("rope: %v", err)
		}
	} else if req.GetRope() != nil {
		return bad("rope config given without a rope_slice saying where the rotated elements are")
	}
	if err := l.Validate(); err != nil {
		return bad("%v", err)
	}
	return l, rcfg, rot, nil
}

func ropeFromProto(r *pb.RopeConfig, slice *layout.RopeSlice) (rope.Config, error) {
	if r == nil {
		return rope.Config{}, fmt.Errorf("missing: a rope_slice needs the RoPE config (base at least)")
	}
	c := rope.Config{Base: r.GetBase(), Dim: slice.Dim, Pairing: rope.Interleaved}
	if slice.Style == layout.HalfSplit {
		c.Pairing = rope.HalfSplit
	}
	if sc := r.GetScaling(); sc != nil {
		t, err := rope.ParseScalingType(strings.ToLower(sc.GetType()))
		if err != nil {
			return c, err
		}
		c.Scaling = rope.Scaling{
			Type: t, Factor: sc.GetFactor(), OriginalMaxPosition: int(sc.GetOriginalMaxPosition()),
			LowFreqFactor: sc.GetLowFreqFactor(), HighFreqFactor: sc.GetHighFreqFactor(),
			BetaFast: sc.GetBetaFast(), BetaSlow: sc.GetBetaSlow(),
			MScale: sc.GetMscale(), MScaleAllDim: sc.GetMscaleAllDim(),
			AttentionFactor: sc.GetAttentionFactor(), NoTruncate: sc.GetNoTruncate(),
		}
	}
	return c, c.Validate()
}

func printable(s string) bool {
	for _, r := range s {
		if r < ' ' || r > '~' {
			return false
		}
	}
	return true
}
