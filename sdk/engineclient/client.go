// Package engineclient is the Go client of kvpilot.v1.Engine:
// what an inference engine written in Go links to use a kvpilot host's KV
// pools. It imports nothing from the host.
//
// Dial connects to the host's engine socket and registers the engine's
// layout. The host answers with its pools: the client fetches the memfd
// descriptors over the host's descriptor socket (SCM_RIGHTS) and maps them,
// so the engine reads and writes KV bytes in place (Device, Host); with a GPU
// the device arena comes as a CUDA IPC handle instead. Then per request:
//
//	m, _ := c.Match(ctx, engineclient.MatchRequest{Session: "s", Tokens: prompt})
//	slots, _ := c.Allocate(ctx, m.RequestID, pagesToPrefill)
//	// write K/V of the uncached tokens into the device arena at slots
//	c.Commit(ctx, m.RequestID, prompt, append(m.PageSlots, slots...)[:fullPages])
//	c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID, CacheControl: ...})
//
// When the host restarts, the engine's next call finds its registration
// unknown: the client registers again (new pools, new mappings; the old
// mappings stay valid until Close so no slice the engine holds is pulled out
// from under it), retries a Match transparently, and fails calls about a
// request that started before with ErrHostRestarted: that request must be
// run again from its Match. Errors from the host are *errcode.Error values
// (errors.Is against the errcode sentinels).
package engineclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// APIVersion is the protocol version this client speaks.
const APIVersion = uint32(pb.EngineApiVersion_ENGINE_API_VERSION_1)

// ErrHostRestarted: the host restarted (or the engine re-registered) while a
// request was running; its slots and locks are gone. Run it again from Match.
var ErrHostRestarted = errors.New("engine client: the host restarted during the request; run it again")

// RopeScaling is the model's rope_scaling.
type RopeScaling struct {
	Type                          string
	Factor                        float64
	OriginalMaxPosition           int
	LowFreqFactor, HighFreqFactor float64
	BetaFast, BetaSlow            float64
	MScale, MScaleAllDim          float64
	AttentionFactor               float64
	NoTruncate                    bool
}

// RopeConfig is the model's rotary embedding; its width and pairing are the
// layout's RopeSlice.
type RopeConfig struct {
	Base    float64
	Scaling RopeScaling
}

// Options configure Dial.
type Options struct {
	// Socket is the host's engine socket.
	Socket string
	// EngineID names this engine in the host's logs and audit log.
	EngineID string
	Layout   enginewire.Layout
	Rope     RopeConfig
	// ResetCache forgets every cached page at registration (needed to
	// register a layout other than the one the host holds pages for).
	ResetCache bool
	// Connector registers in connector mode: the engine keeps its own device
	// memory and copies pages through the host's staging arena (Device).
	// Processes of one engine registering with the same EngineID and layout
	// share one registration.
	Connector bool
	// Parts is how many processes of a connector-mode engine write each
	// page, each its slice (its tensor-parallel ranks: AllocatePart,
	// CommitPart); 0 or 1: one writes whole pages.
	Parts int
	// OnReregister is called after the client registered again because the
	// host restarted; the engine drops whatever it kept about slots.
	OnReregister func(Registration)
	Logger       hclog.Logger
}

// Registration is the host's answer to Register.
type Registration struct {
	ID, BootID, WorkerID string
	Fingerprint          uint64
	PageSize, PageBytes  int
	Reattached           bool
	// Joined: a connector-mode registration joined the live one of its
	// engine (another process of it registered first).
	Joined      bool
	CachedPages int
	// Generation counts registrations by this client, from 1.
	Generation int
	// Features the host announced (enginewire.Feature*).
	Features []string
}

// Has reports whether the host announced feature f.
func (r Registration) Has(f string) bool { return slices.Contains(r.Features, f) }

// Client is a registered engine's connection. It is safe for concurrent use.
type Client struct {
	o    Options
	conn *grpc.ClientConn
	rpc  pb.EngineClient
	log  hclog.Logger

	mu      sync.Mutex
	reg     Registration
	device  *Arena
	host    *Arena
	retired []*Arena // mappings of earlier registrations, unmapped at Close
	closed  bool
}

// Dial connects to the host and registers. ctx bounds the registration.
func Dial(ctx context.Context, o Options) (*Client, error) {
	if err := o.Layout.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	// "unix:PATH" takes relative paths too; "unix://" would read the first
	// element of a relative path as an authority.
	conn, err := grpc.NewClient("unix:"+o.Socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
	)
	if err != nil {
		return nil, fmt.Errorf("engine socket %s: %w", o.Socket, err)
	}
	c := &Client{o: o, conn: conn, rpc: pb.NewEngineClient(conn), log: o.Logger}
	if err := c.register(ctx, 0); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return c, nil
}

// Registration returns the live registration.
func (c *Client) Registration() Registration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reg
}

// Device returns the device arena of the live registration. After a
// re-registration it is a new Arena: fetch it again rather than keeping it.
func (c *Client) Device() *Arena {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.device
}

// Host returns the host-tier arena (nil when the host has none).
func (c *Client) Host() *Arena {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.host
}

// Close unmaps every arena and closes the connection; the host releases the
// engine's requests when it registers again or they idle out.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, a := range append(c.retired, c.device, c.host) {
		if a != nil {
			errs = append(errs, a.unmap())
		}
	}
	errs = append(errs, c.conn.Close())
	return errors.Join(errs...)
}

func (c *Client) registerRequest() *pb.RegisterRequest {
	l := c.o.Layout
	req := &pb.RegisterRequest{
		ApiVersion: APIVersion, EngineId: c.o.EngineID, Model: l.Model, PageSize: uint32(l.PageSize),
		Dtype: l.DType, Layers: uint32(l.Layers), ResetCache: c.o.ResetCache, Parts: uint32(max(c.o.Parts, 0)),
	}
	if c.o.Connector {
		req.Mode = pb.EngineMode_ENGINE_MODE_CONNECTOR
	}
	for _, b := range l.Buffers {
		req.Buffers = append(req.Buffers, &pb.KVBuffer{Name: b.Name, Heads: uint32(b.Heads), HeadDim: uint32(b.HeadDim)})
	}
	if r := l.Rope; r != nil {
		req.RopeSlice = &pb.RopeSlice{Buffer: uint32(r.Buffer), Offset: uint32(r.Offset), Dim: uint32(r.Dim), Style: r.Style}
		s := c.o.Rope.Scaling
		req.Rope = &pb.RopeConfig{Base: c.o.Rope.Base, Scaling: &pb.RopeScaling{
			Type: s.Type, Factor: s.Factor, OriginalMaxPosition: uint32(s.OriginalMaxPosition),
			LowFreqFactor: s.LowFreqFactor, HighFreqFactor: s.HighFreqFactor, BetaFast: s.BetaFast, BetaSlow: s.BetaSlow,
			Mscale: s.MScale, MscaleAllDim: s.MScaleAllDim, AttentionFactor: s.AttentionFactor, NoTruncate: s.NoTruncate,
		}}
	}
	return req
}

// register registers (again) unless another goroutine already did since
// generation seen.
func (c *Client) register(ctx context.Context, seen int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errcode.New(errcode.Unavailable, "engine client closed")
	}
	if c.reg.Generation != seen {
		return nil
	}
	req := c.registerRequest()
	if seen > 0 {
		req.ResetCache = false // a reset is asked for once, at Dial
	}
	resp, err := c.rpc.Register(ctx, req, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("register with the host at %s: %w", c.o.Socket, convert.FromGRPCStatus(err))
	}
	reg := Registration{
		ID: resp.GetRegistrationId(), BootID: resp.GetBootId(), WorkerID: resp.GetWorkerId(),
		Fingerprint: resp.GetLayoutFingerprint(), PageSize: int(resp.GetPageSize()), PageBytes: int(resp.GetPageBytes()),
		Reattached: resp.GetReattached(), Joined: resp.GetJoined(), CachedPages: int(resp.GetCachedPages()), Generation: seen + 1,
		Features: resp.GetFeatures(),
	}
	if reg.PageSize != c.o.Layout.PageSize || reg.PageBytes != c.o.Layout.PageBytes() {
		return fmt.Errorf("host answered page size %d and %d-byte pages; this engine's layout has %d and %d", reg.PageSize, reg.PageBytes, c.o.Layout.PageSize, c.o.Layout.PageBytes())
	}
	arenas, err := c.openArenas(ctx, resp)
	if err != nil {
		return err
	}
	if c.device != nil {
		c.retired = append(c.retired, c.device)
	}
	if c.host != nil {
		c.retired = append(c.retired, c.host)
	}
	c.device, c.host = arenas["device"], arenas["host"]
	if c.device == nil {
		for _, a := range arenas {
			_ = a.unmap()
		}
		return errors.New("the host offered no device arena")
	}
	if seen > 0 && c.reg.BootID != reg.BootID {
		c.log.Info("host restarted; registered again", "boot_id", reg.BootID, "registration", reg.ID)
	}
	c.reg = reg
	return nil
}

func (c *Client) openArenas(ctx context.Context, resp *pb.RegisterResponse) (map[string]*Arena, error) {
	arenas := map[string]*Arena{}
	var memfds []*Arena
	for _, h := range resp.GetPools() {
		a := &Arena{
			Kind: h.GetKind(), Slots: int(h.GetSlots()), Arrangement: enginewire.Arrangement(h.GetArrangement()),
			SizeBytes: int64(h.GetSizeBytes()), Pinned: h.GetPinned(), Staging: h.GetStaging(), CUDAIPC: h.GetCudaIpc(),
			DeviceOrdinal: int(h.GetDeviceOrdinal()), layout: &c.o.Layout,
		}
		switch h.GetTier() {
		case pb.Tier_TIER_DEVICE:
			a.Tier = "device"
		case pb.Tier_TIER_HOST:
			a.Tier = "host"
		default:
			return nil, fmt.Errorf("host offered a pool on tier %v", h.GetTier())
		}
		if a.Arrangement != enginewire.PageMajor && a.Arrangement != enginewire.LayerMajor {
			return nil, fmt.Errorf("%s arena: unknown arrangement %q", a.Tier, a.Arrangement)
		}
		switch a.Kind {
		case "memfd":
			memfds = append(memfds, a)
		case "cuda_ipc":
		default:
			return nil, fmt.Errorf("%s arena: unknown kind %q", a.Tier, a.Kind)
		}
		arenas[a.Tier] = a
	}
	if len(memfds) == 0 {
		return arenas, nil
	}
	fds, err := claimFDs(ctx, resp.GetFdSocket(), resp.GetFdToken(), len(memfds))
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd) // the mappings keep the memory
		}
	}()
	for i, a := range memfds {
		if err := mapArena(fds[i], a); err != nil {
			for _, m := range memfds[:i] {
				_ = m.unmap()
			}
			return nil, err
		}
	}
	return arenas, nil
}

// call runs fn with the live registration id. If the host does not know
// the registration (it restarted), the client registers again; fn is then
// retried when retry is set, else ErrHostRestarted is returned.
func (c *Client) call(ctx context.Context, retry bool, fn func(regID string) error) error {
	reg := c.Registration()
	err := fn(reg.ID)
	if err == nil {
		return nil
	}
	e := convert.FromGRPCStatus(err)
	if e.Code != errcode.UnknownRegistration {
		return e
	}
	if rerr := c.register(ctx, reg.Generation); rerr != nil {
		return fmt.Errorf("%w (and registering again failed: %v)", e, rerr)
	}
	if cb := c.o.OnReregister; cb != nil {
		cb(c.Registration())
	}
	if !retry {
		return fmt.Errorf("%w: %v", ErrHostRestarted, e)
	}
	if err := fn(c.Registration().ID); err != nil {
		return convert.FromGRPCStatus(err)
	}
	return nil
}
