package grpcserver

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// WatchEvents streams KV events as they are published, filtered by the
// request's tiers and by the tenant in the kvpilot-tenant metadata (which a
// uid bound by control.tenants must be granted; see TenantBinding.Default
// for a bound uid that names none). It
// starts with the events published after the call; headers are sent once
// the watch is registered, so a client that waits for them misses nothing
// that follows. A watcher that cannot keep up is ended with
// RESOURCE_EXHAUSTED rather than allowed to delay the host or miss events
// unknowingly.
func (s *Server) WatchEvents(req *pb.WatchEventsRequest, stream grpc.ServerStreamingServer[pb.KVEvent]) error {
	if s.cfg.Hub == nil {
		return convert.GRPCStatus(errcode.New(errcode.Unavailable, "this host publishes no events"))
	}
	ctx := stream.Context()
	var tiers [tier.Count + 1]bool
	for _, t := range req.GetTiers() {
		if t <= pb.Tier_TIER_UNSPECIFIED || int(t) > tier.Count {
			return convert.GRPCStatus(errcode.New(errcode.InvalidTier, "%v", t))
		}
		tiers[t] = true
	}
	filterTiers := len(req.GetTiers()) > 0
	md, _ := metadata.FromIncomingContext(ctx)
	var tenant string
	filterTenant := false
	if vs := md.Get(controlclient.MetadataTenant); len(vs) > 0 {
		if tenant = metadataValue(ctx, controlclient.MetadataTenant); tenant == "" && vs[0] != "" {
			return convert.GRPCStatus(errcode.New(errcode.BadRequest, "%s must be at most 64 printable characters", controlclient.MetadataTenant))
		}
		filterTenant = true
	}
	// A uid bound by control.tenants watches only its tenants: it names
	// one, or gets its only one; everyone else may watch all.
	tenant, all, err := s.binding.Default(uidOf(ctx), tenant, filterTenant)
	if err != nil {
		return convert.GRPCStatus(errcode.From(err))
	}
	filterTenant = !all
	// Events name the cache namespace a page lives in, which tenants that
	// share one (index.share) have in common.
	ns := s.cfg.Index.Namespace(tenant)
	var filter func(*events.RouterEvent) bool
	if filterTiers || filterTenant {
		filter = func(ev *events.RouterEvent) bool {
			if filterTenant && ev.Tenant != ns {
				return false
			}
			if filterTiers {
				t, err := tier.Parse(ev.StorageTier)
				return err == nil && tiers[TierToProto(t)]
			}
			return true
		}
	}
	w := s.cfg.Hub.Subscribe(s.cfg.WatchBuffer, filter)
	defer w.Close()
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.done:
			return convert.GRPCStatus(errcode.New(errcode.Unavailable, "the host is shutting down; watch again after it restarts"))
		case ev, ok := <-w.Events():
			if !ok {
				if err := w.Err(); err != nil {
					return status.Errorf(codes.ResourceExhausted,
						"watch ended: %v; re-read the cache state (Stats) and watch again, or read events faster", err)
				}
				return convert.GRPCStatus(errcode.New(errcode.Unavailable, "watch closed"))
			}
			if err := stream.Send(KVEventToProto(&ev)); err != nil {
				return err
			}
		}
	}
}

// KVEventToProto converts a RouterEvent for WatchEvents.
func KVEventToProto(ev *events.RouterEvent) *pb.KVEvent {
	out := &pb.KVEvent{EventId: ev.Event.EventID, DpRank: int32(ev.Event.DPRank)}
	out.WorkerId = uitoa(ev.WorkerID)
	if t, err := tier.Parse(ev.StorageTier); err == nil {
		out.StorageTier = TierToProto(t)
	}
	switch d := ev.Event.Data; {
	case d.Stored != nil:
		st := &pb.KVEvent_Stored{ParentHash: d.Stored.ParentHash, Blocks: make([]*pb.StoredBlock, len(d.Stored.Blocks))}
		for i, b := range d.Stored.Blocks {
			st.Blocks[i] = &pb.StoredBlock{BlockHash: b.BlockHash, TokensHash: b.TokensHash}
		}
		out.Data = &pb.KVEvent_Stored_{Stored: st}
	case d.Removed != nil:
		out.Data = &pb.KVEvent_Removed_{Removed: &pb.KVEvent_Removed{BlockHashes: d.Removed.BlockHashes}}
	default:
		out.Data = &pb.KVEvent_Cleared_{Cleared: &pb.KVEvent_Cleared{}}
	}
	return out
}
