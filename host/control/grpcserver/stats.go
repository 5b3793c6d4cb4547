package grpcserver

import (
	"context"
	"strconv"

	"github.com/kvpilot/kvpilot/host/tier"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Stats reports each tier's pages, bytes, pinned and leased pages. Bytes
// are pages times the page size in bytes, which the host learns when an
// engine registers its layout; until then they read 0.
func (s *Server) Stats(context.Context, *pb.StatsRequest) (*pb.StatsResponse, error) {
	s.cfg.Lock.Lock()
	st := s.cfg.Index.Stats()
	pageSize := s.cfg.Index.PageSize()
	s.cfg.Lock.Unlock()
	var bpp int64
	if s.cfg.BytesPerPage != nil {
		bpp = s.cfg.BytesPerPage()
	}
	resp := &pb.StatsResponse{
		WorkerId:       s.worker,
		PageSizeTokens: int64(pageSize),
		Leases:         int64(st.Leases),
		// Sessions are the engine service's; the index does not count them.
		Tiers: make([]*pb.TierStats, 0, tier.Count),
	}
	for _, t := range tier.All {
		ts := st.Tiers[t]
		resp.Tiers = append(resp.Tiers, &pb.TierStats{
			Tier:          TierToProto(t),
			Pages:         int64(ts.Pages),
			Bytes:         int64(ts.Pages) * bpp,
			CapacityBytes: int64(ts.Capacity) * bpp,
			PinnedPages:   int64(ts.Pinned),
			PinnedBytes:   int64(ts.Pinned) * bpp,
			LeasedPages:   int64(ts.Leased),
		})
	}
	return resp, nil
}

// TierToProto maps a host tier to the proto enum (Device is TIER_DEVICE,
// and so on; the enum's zero is "unspecified").
func TierToProto(t tier.Tier) pb.Tier { return pb.Tier(t) + pb.Tier_TIER_DEVICE }

func uitoa(v uint64) string { return strconv.FormatUint(v, 10) }
