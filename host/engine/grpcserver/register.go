package grpcserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/rpcpeer"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/kernels/rope"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// APIVersion is the protocol version this host speaks.
const APIVersion = uint32(pb.EngineApiVersion_ENGINE_API_VERSION_1)

// Register implements kvpilot.v1.Engine.
func (s *Server) Register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	resp, err := s.register(ctx, req)
	if err != nil {
		s.cfg.Log.Warn("registration refused", "engine_id", req.GetEngineId(), "error", err)
		return nil, status(err)
	}
	return resp, nil
}

func (s *Server) register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	if v := req.GetApiVersion(); v != APIVersion {
		return nil, errcode.New(errcode.BadRequest, "api_version %d: this host speaks %d", v, APIVersion)
	}
	if id := req.GetEngineId(); len(id) > 128 || !engine.Printable(id) {
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
	uid := -1
	if p, ok := rpcpeer.Of(ctx); ok {
		uid = p.UID
	}
	r, err := s.eng.Register(ctx, engine.RegisterArgs{EngineID: req.GetEngineId(), UID: uid, Layout: l, Rope: rcfg, Rotary: rot,
		Mode: mode, Reset: req.GetResetCache(), Recompute: req.GetRecompute(),
		Parts: int(min(req.GetParts(), 1<<16))})
	if err != nil {
		return nil, err
	}
	handles, fds := poolHandles(r.Pools, r.Mode)
	return &pb.RegisterResponse{
		RegistrationId:    r.ID,
		BootId:            s.eng.BootID(),
		WorkerId:          s.cfg.WorkerID,
		LayoutFingerprint: uint64(r.Layout.Fingerprint()),
		PageSize:          uint32(r.Layout.PageSize),
		PageBytes:         uint64(r.Layout.PageBytes()),
		Pools:             handles,
		FdSocket:          s.cfg.FDSocket,
		FdToken:           s.fds.offer(r.ID, uid, fds),
		ApiVersion:        APIVersion,
		CachedPages:       uint64(r.CachedPages),
		Mode:              modeToProto(r.Mode),
		Reattached:        r.Reattached,
		Joined:            r.Joined,
		Features:          enginewire.HostFeatures,
	}, nil
}

func modeToProto(m engine.Mode) pb.EngineMode {
	if m == engine.ModeConnector {
		return pb.EngineMode_ENGINE_MODE_CONNECTOR
	}
	return pb.EngineMode_ENGINE_MODE_ARENA
}

func modeFromProto(m pb.EngineMode) (engine.Mode, error) {
	switch m {
	case pb.EngineMode_ENGINE_MODE_UNSPECIFIED, pb.EngineMode_ENGINE_MODE_ARENA:
		return engine.ModeArena, nil
	case pb.EngineMode_ENGINE_MODE_CONNECTOR:
		return engine.ModeConnector, nil
	}
	return 0, errcode.New(errcode.BadRequest, "mode %d: want arena (1) or connector (2)", int32(m))
}

// poolHandles describes the memory pools for the engine, and lists the
// memfd descriptors in the order the side channel sends them.
func poolHandles(p *engine.Pools, mode engine.Mode) ([]*pb.PoolHandle, []int) {
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
			Staging:       t == tier.Device && mode == engine.ModeConnector,
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
