package grpcserver

import (
	"context"
	"time"

	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// A request's calls: each converts its proto to the engine service's
// arguments, calls it, and converts the answer back, or the error to its
// gRPC status.

// Match implements kvpilot.v1.Engine.
func (s *Server) Match(ctx context.Context, req *pb.MatchRequest) (*pb.MatchResponse, error) {
	m, err := s.eng.Match(ctx, engine.MatchArgs{RegistrationID: req.GetRegistrationId(), RequestID: req.GetRequestId(),
		Session: req.GetSession(), Tenant: req.GetTenant(), Tokens: req.GetTokens(), Messages: convert.ChatMessagesFromProto(req.GetMessages()),
		LoadBackDeadline: msDuration(req.GetLoadBackDeadlineMs())})
	if err != nil {
		return nil, status(err)
	}
	return &pb.MatchResponse{
		RequestId: m.RequestID, PageSize: uint32(m.PageSize), BlockHashes: m.BlockHashes,
		CachedTokens: uint32(m.CachedTokens), PageSlots: m.PageSlots,
		LoadedPages: uint32(m.LoadedPages), LoadedBytes: uint64(m.LoadedBytes),
		LoadBackUs:         uint32(min(m.LoadBack.Microseconds(), 1<<32-1)),
		LoadBackIncomplete: m.LoadBackIncomplete, DroppedPages: uint32(m.DroppedPages),
	}, nil
}

// Allocate implements kvpilot.v1.Engine.
func (s *Server) Allocate(ctx context.Context, req *pb.AllocateRequest) (*pb.AllocateResponse, error) {
	a, err := s.eng.AllocatePart(ctx, req.GetRegistrationId(), req.GetRequestId(), int(req.GetPages()), int(req.GetFirstPage()), int(req.GetPart()))
	if err != nil {
		return nil, status(err)
	}
	return &pb.AllocateResponse{PageSlots: a.Slots, EvictedPages: uint32(a.Evicted)}, nil
}

// Commit implements kvpilot.v1.Engine.
func (s *Server) Commit(_ context.Context, req *pb.CommitRequest) (*pb.CommitResponse, error) {
	c, err := s.eng.CommitPart(req.GetRegistrationId(), req.GetRequestId(), req.GetTokens(), int(req.GetFirstPage()), req.GetPageSlots(), int(req.GetPart()))
	if err != nil {
		return nil, status(err)
	}
	return &pb.CommitResponse{Stored: uint32(c.Stored), Present: uint32(c.Present), BlockHashes: c.BlockHashes,
		PartsWaiting: uint32(c.PartsWaiting)}, nil
}

// Release implements kvpilot.v1.Engine.
func (s *Server) Release(_ context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	n, err := s.eng.Release(req.GetRegistrationId(), req.GetRequestId())
	if err != nil {
		return nil, status(err)
	}
	return &pb.ReleaseResponse{FreedSlots: uint32(n)}, nil
}

// Finish implements kvpilot.v1.Engine.
func (s *Server) Finish(ctx context.Context, req *pb.FinishRequest) (*pb.FinishResponse, error) {
	cc, err := cacheControlOf(req)
	if err != nil {
		return nil, status(err)
	}
	u := req.GetUsage()
	f, err := s.eng.Finish(ctx, engine.FinishArgs{RegistrationID: req.GetRegistrationId(), RequestID: req.GetRequestId(), CacheControl: cc,
		Usage: engine.Usage{InputTokens: int64(u.GetInputTokens()), CachedTokens: int64(u.GetCachedTokens()),
			OutputTokens: int64(u.GetOutputTokens()), ReasoningTokens: int64(u.GetReasoningTokens())}})
	if err != nil {
		return nil, status(err)
	}
	resp := &pb.FinishResponse{FreedSlots: uint32(f.FreedSlots), Pinned: f.Pinned, PinnedBlocks: uint32(f.PinnedBlocks), TotalBlocks: uint32(f.TotalBlocks)}
	if f.Pinned {
		resp.TtlMs = uint64(cc.TTL.Milliseconds())
	}
	if f.PinError != nil {
		resp.PinError = convert.ErrorToProto(f.PinError)
	}
	return resp, nil
}

func msDuration(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }

// cacheControlOf reads Finish's cache_control from the message or its JSON
// (Anthropic or nvext form); when both are given they must agree.
func cacheControlOf(req *pb.FinishRequest) (enginewire.CacheControl, error) {
	var cc enginewire.CacheControl
	if m := req.GetCacheControl(); m != nil {
		d, err := enginewire.ParseTTL(m.GetTtl())
		if err != nil {
			return cc, err
		}
		cc = enginewire.CacheControl{Type: m.GetType(), TTL: d}
		if err := cc.Validate(); err != nil {
			return cc, err
		}
	}
	if js := req.GetCacheControlJson(); js != "" {
		if len(js) > 1<<20 {
			return cc, errcode.New(errcode.PayloadTooLarge, "cache_control_json of %d bytes", len(js))
		}
		j, err := enginewire.ParseCacheControlJSON([]byte(js))
		if err != nil {
			return cc, err
		}
		if cc.Present() && j.Present() && j != cc {
			return cc, errcode.New(errcode.BadRequest, "cache_control and cache_control_json disagree")
		}
		if j.Present() {
			cc = j
		}
	}
	return cc, nil
}
