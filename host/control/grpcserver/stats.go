package grpcserver

import (
	"context"
	"strconv"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Stats reports each tier's pages, bytes, pinned and leased pages,
// host-wide or for the tenant the request names. A uid bound by
// control.tenants sees only its tenants: it must name one of them, unless
// it is bound to exactly one, which is then the default. Bytes are pages
// times the page size in bytes, which the host learns when an engine
// registers its layout; until then they read 0.
func (s *Server) Stats(ctx context.Context, req *pb.StatsRequest) (*pb.StatsResponse, error) {
	named := req.GetTenant()
	if len(named) > directive.MaxNameLen {
		return nil, convert.GRPCStatus(errcode.New(errcode.BadRequest, "tenant is %d bytes, at most %d", len(named), directive.MaxNameLen))
	}
	tenant, all, err := s.binding.Default(uidOf(ctx), named, named != "")
	if err != nil {
		return nil, convert.GRPCStatus(errcode.From(err))
	}
	var (
		st       cache.Stats
		ts       cache.TenantStats
		pins     int
		degraded []cache.DegradedLease
	)
	s.cfg.Index.Do(func(ix *cache.Index) {
		if all {
			st = ix.Stats()
		} else {
			ts = ix.TenantStats(tenant)
		}
		pins = ix.PinCount(tenant, all)
		degraded = ix.DegradedLeases()
	})
	pageSize := s.cfg.Index.PageSize()
	tiers, leases := st.Tiers, st.Leases
	if !all {
		tiers, leases = ts.Tiers, ts.Leases
	}
	restoring := false
	if s.cfg.Saved != nil {
		// Before the pools open nothing is restored: report what was
		// saved, not zeros an operator would read as pins lost.
		if p, l, ok := s.cfg.Saved(tenant, all); ok {
			pins, leases, restoring = p, l, true
		}
	}
	var bpp int64
	if s.cfg.BytesPerPage != nil {
		bpp = s.cfg.BytesPerPage()
	}
	resp := &pb.StatsResponse{
		WorkerId:       s.worker,
		PageSizeTokens: int64(pageSize),
		Leases:         int64(leases),
		Pins:           int64(pins),
		RestorePending: restoring,
		Tiers:          make([]*pb.TierStats, 0, tier.Count),
	}
	// Sessions are the engine service's; the index does not count them.
	if s.cfg.Sessions != nil {
		resp.Sessions = int64(s.cfg.Sessions(tenant, all))
	}
	for _, l := range degraded {
		if all || l.Tenant == tenant {
			resp.DegradedLeases = append(resp.DegradedLeases, &pb.DegradedLease{LeaseId: l.ID, Tenant: l.Tenant, Reason: l.Reason})
		}
	}
	if !all {
		resp.Tenant = tenant
		resp.TenantPages = int64(ts.Pages)
		resp.TenantPinnedPages = int64(ts.PinnedPages)
		resp.TenantPinQuota = int64(ts.PinQuota)
	}
	for _, t := range tier.All {
		row := tiers[t]
		resp.Tiers = append(resp.Tiers, &pb.TierStats{
			Tier:          TierToProto(t),
			Pages:         int64(row.Pages),
			Bytes:         int64(row.Pages) * bpp,
			CapacityBytes: int64(row.Capacity) * bpp,
			PinnedPages:   int64(row.Pinned),
			PinnedBytes:   int64(row.Pinned) * bpp,
			LeasedPages:   int64(row.Leased),
		})
	}
	return resp, nil
}

// TierToProto maps a host tier to the proto enum (Device is TIER_DEVICE,
// and so on; the enum's zero is "unspecified").
func TierToProto(t tier.Tier) pb.Tier { return pb.Tier(t) + pb.Tier_TIER_DEVICE }

func uitoa(v uint64) string { return strconv.FormatUint(v, 10) }

// Ping answers with the worker id and does nothing else.
func (s *Server) Ping(context.Context, *pb.PingRequest) (*pb.PingResponse, error) {
	return &pb.PingResponse{WorkerId: s.worker}, nil
}
