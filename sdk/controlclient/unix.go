package controlclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// UnixOptions configure DialUnix.
type UnixOptions struct {
	// Source names this client in the host's audit log, after the uid the
	// host reads from the socket (at most 64 printable characters).
	Source string
	// MaxRecvBytes bounds one response (default 16 MiB).
	MaxRecvBytes int
}

// UnixClient talks gRPC to the Control service on a host's Unix socket.
type UnixClient struct {
	conn *grpc.ClientConn
	rpc  pb.ControlClient
	md   metadata.MD
}

var _ Client = (*UnixClient)(nil)

// DialUnix connects to the Control socket at path. The connection is made
// on first use; a missing socket is reported here.
func DialUnix(path string, o UnixOptions) (*UnixClient, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w (is `kvpilot serve` running, and is this the path in control.socket?)", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("control socket %s is not a socket", path)
	}
	if o.MaxRecvBytes <= 0 {
		o.MaxRecvBytes = 16 << 20
	}
	conn, err := grpc.NewClient("unix:"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxRecvBytes)),
		// Fixed windows turn off gRPC's bandwidth-delay probing (a ping
		// per message on an idle connection): only latency on a socket.
		grpc.WithInitialWindowSize(1<<20),
		grpc.WithInitialConnWindowSize(4<<20),
	)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	c := &UnixClient{conn: conn, rpc: pb.NewControlClient(conn)}
	if o.Source != "" {
		c.md = metadata.Pairs(MetadataSource, o.Source)
	}
	return c, nil
}

// RPC is the generated client, for calls this package does not wrap.
func (c *UnixClient) RPC() pb.ControlClient { return c.rpc }

func (c *UnixClient) ctx(ctx context.Context) context.Context {
	if c.md == nil {
		return ctx
	}
	return metadata.NewOutgoingContext(ctx, c.md)
}

// Apply implements Client.
func (c *UnixClient) Apply(ctx context.Context, t directive.Turn) (directive.TurnReply, error) {
	resp, err := c.rpc.Apply(c.ctx(ctx), convert.TurnToApply(t))
	if err != nil {
		return directive.TurnReply{}, convert.FromGRPCStatus(err)
	}
	return convert.ApplyResponseToReply(resp), nil
}

// CacheControl implements Client.
func (c *UnixClient) CacheControl(ctx context.Context, cc directive.CacheControl, tenant string) (directive.CacheControlReply, error) {
	resp, err := c.rpc.CacheControl(c.ctx(ctx), convert.CacheControlToProto(cc, tenant))
	if err != nil {
		return directive.CacheControlReply{}, convert.FromGRPCStatus(err)
	}
	return convert.CacheControlReplyFromProto(resp), nil
}

// Stats implements Client.
func (c *UnixClient) Stats(ctx context.Context) (Stats, error) { return c.TenantStats(ctx, "") }

// Ping checks the host answers on the socket and returns its worker id.
func (c *UnixClient) Ping(ctx context.Context) (string, error) {
	resp, err := c.rpc.Ping(c.ctx(ctx), &pb.PingRequest{})
	if err != nil {
		return "", convert.FromGRPCStatus(err)
	}
	return resp.GetWorkerId(), nil
}

// TenantStats implements Client.
func (c *UnixClient) TenantStats(ctx context.Context, tenant string) (Stats, error) {
	resp, err := c.rpc.Stats(c.ctx(ctx), &pb.StatsRequest{Tenant: tenant})
	if err != nil {
		return Stats{}, convert.FromGRPCStatus(err)
	}
	s := Stats{WorkerID: resp.GetWorkerId(), PageSizeTokens: resp.GetPageSizeTokens(), Leases: resp.GetLeases(), Sessions: resp.GetSessions(),
		Tenant: resp.GetTenant(), TenantPages: resp.GetTenantPages(), TenantPinnedPages: resp.GetTenantPinnedPages(), TenantPinQuota: resp.GetTenantPinQuota()}
	s.Pins, s.RestorePending = resp.GetPins(), resp.GetRestorePending()
	for _, l := range resp.GetDegradedLeases() {
		s.DegradedLeases = append(s.DegradedLeases, DegradedLease{LeaseID: l.GetLeaseId(), Tenant: l.GetTenant(), Reason: l.GetReason()})
	}
	for _, t := range resp.GetTiers() {
		name, _ := convert.TierFromProto(t.GetTier())
		s.Tiers = append(s.Tiers, TierStats{Tier: string(name), Pages: t.GetPages(), Bytes: t.GetBytes(), CapacityBytes: t.GetCapacityBytes(),
			PinnedPages: t.GetPinnedPages(), PinnedBytes: t.GetPinnedBytes(), LeasedPages: t.GetLeasedPages()})
	}
	return s, nil
}

// Watch implements Client. A watcher that falls behind is ended by the
// host, and Watch returns an error wrapping ErrFellBehind: re-read the state
// you derive from events, and watch again.
func (c *UnixClient) Watch(ctx context.Context, o WatchOptions, fn func(Event) error) error {
	req := &pb.WatchEventsRequest{}
	for _, name := range o.Tiers {
		t := convert.TierToProto(name)
		if t == pb.Tier_TIER_UNSPECIFIED {
			return errcode.New(errcode.InvalidTier, "%q", name)
		}
		req.Tiers = append(req.Tiers, t)
	}
	ctx, cancel := context.WithCancel(c.ctx(ctx))
	defer cancel()
	if o.Tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, MetadataTenant, o.Tenant)
	}
	stream, err := c.rpc.WatchEvents(ctx, req)
	if err != nil {
		return convert.FromGRPCStatus(err)
	}
	md, err := stream.Header()
	if err != nil {
		return convert.FromGRPCStatus(err)
	}
	if md == nil {
		// The host ended the call without registering the watch (refused
		// it: rate limit, tenant binding, bad tier): Recv has the status.
		// Ready is not called, since nothing is watched.
		if _, err := stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
			return convert.FromGRPCStatus(err)
		}
		return nil
	}
	if o.Ready != nil {
		o.Ready()
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// A watcher that fell behind is ended with RESOURCE_EXHAUSTED
			// and no registry code; a watch refused by the rate limit
			// carries rate_limited, which is not falling behind.
			if status.Code(err) == codes.ResourceExhausted && !strings.HasPrefix(status.Convert(err).Message(), string(errcode.RateLimited)+": ") {
				return fmt.Errorf("%w: %s", ErrFellBehind, status.Convert(err).Message())
			}
			return convert.FromGRPCStatus(err)
		}
		if err := fn(eventFromProto(m)); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
}

// Close implements Client.
func (c *UnixClient) Close() error { return c.conn.Close() }
