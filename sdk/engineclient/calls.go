package engineclient

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// waitReady makes a call wait for the socket to come back (a restarting
// host) instead of failing at once; ctx bounds the wait.
var waitReady = grpc.WaitForReady(true)

// MatchRequest starts a request.
type MatchRequest struct {
	// RequestID is optional; the host makes one when empty.
	RequestID string
	Session   string
	Tenant    string
	Tokens    []uint32
	Messages  []chat.Message
	// LoadBackDeadline, when set, shortens the host's load-back deadline.
	LoadBackDeadline time.Duration
}

// MatchResult is the cached prefix handed to the request.
type MatchResult struct {
	RequestID string
	// CachedTokens are covered by PageSlots (device slots, root first),
	// locked for the request until Release or Finish.
	CachedTokens int
	PageSlots    []uint32
	// BlockHashes are the sequence hashes of every full page of the prompt.
	BlockHashes        []uint64
	LoadedPages        int
	LoadedBytes        int64
	LoadBack           time.Duration
	LoadBackIncomplete bool
	DroppedPages       int
	// Generation is the registration the request runs under.
	Generation int
}

// Match finds the prompt's cached prefix, loading pages back from colder
// tiers, and locks it for the request.
func (c *Client) Match(ctx context.Context, r MatchRequest) (MatchResult, error) {
	req := &pb.MatchRequest{RequestId: r.RequestID, Session: r.Session, Tenant: r.Tenant, Tokens: r.Tokens,
		LoadBackDeadlineMs: uint32(r.LoadBackDeadline.Milliseconds()), Messages: convert.ChatMessagesToProto(r.Messages)}
	var resp *pb.MatchResponse
	var gen int
	err := c.call(ctx, true, func(reg string) (err error) {
		req.RegistrationId = reg
		gen = c.Registration().Generation
		resp, err = c.rpc.Match(ctx, req, waitReady)
		return err
	})
	if err != nil {
		return MatchResult{}, err
	}
	return MatchResult{
		RequestID: resp.GetRequestId(), CachedTokens: int(resp.GetCachedTokens()), PageSlots: resp.GetPageSlots(),
		BlockHashes: resp.GetBlockHashes(), LoadedPages: int(resp.GetLoadedPages()), LoadedBytes: int64(resp.GetLoadedBytes()),
		LoadBack: time.Duration(resp.GetLoadBackUs()) * time.Microsecond, LoadBackIncomplete: resp.GetLoadBackIncomplete(),
		DroppedPages: int(resp.GetDroppedPages()), Generation: gen,
	}, nil
}

// Allocate returns device page slots for the request's prefill.
func (c *Client) Allocate(ctx context.Context, requestID string, pages int) ([]uint32, error) {
	var resp *pb.AllocateResponse
	err := c.call(ctx, false, func(reg string) (err error) {
		resp, err = c.rpc.Allocate(ctx, &pb.AllocateRequest{RegistrationId: reg, RequestId: requestID, Pages: uint32(pages)}, waitReady)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetPageSlots(), nil
}

// AllocatePart returns the slots of the save of pages from firstPage for
// part (1..Options.Parts): the first part to ask allocates them, every
// other gets the same ones. It needs enginewire.FeatureCommitParts.
func (c *Client) AllocatePart(ctx context.Context, requestID string, pages, firstPage, part int) ([]uint32, error) {
	if !c.Registration().Has(enginewire.FeatureCommitParts) {
		return nil, errcode.New(errcode.NotSupportedYet, "allocate for part %d: the host does not announce %s; register one process per engine", part, enginewire.FeatureCommitParts)
	}
	var resp *pb.AllocateResponse
	err := c.call(ctx, false, func(reg string) (err error) {
		resp, err = c.rpc.Allocate(ctx, &pb.AllocateRequest{RegistrationId: reg, RequestId: requestID, Pages: uint32(pages),
			FirstPage: uint32(firstPage), Part: uint32(part)}, waitReady)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetPageSlots(), nil
}

// CommitResult reports a commit.
type CommitResult struct {
	Stored, Present int
	BlockHashes     []uint64
	// PartsWaiting: a part's commit (CommitPart) left this many parts to
	// commit the pages before they are cached; 0 once they are.
	PartsWaiting int
}

// Commit records the request's first len(pageSlots) full pages of tokens
// (the whole sequence from position 0) as written into pageSlots.
func (c *Client) Commit(ctx context.Context, requestID string, tokens, pageSlots []uint32) (CommitResult, error) {
	return c.CommitFrom(ctx, requestID, tokens, 0, pageSlots)
}

// CommitFrom records full pages [firstPage, firstPage+len(pageSlots)) of
// tokens (the whole sequence from position 0) as written into pageSlots;
// the pages before firstPage are ones the request matched or committed
// earlier. An engine that commits a prompt in several steps sends each
// step's new pages this way: the host may have moved the earlier pages off
// their slots since.
//
// A host that did not announce enginewire.FeatureCommitFirstPage would read
// the slots as from the root: CommitFrom refuses (not_supported_yet) rather
// than send it a firstPage.
func (c *Client) CommitFrom(ctx context.Context, requestID string, tokens []uint32, firstPage int, pageSlots []uint32) (CommitResult, error) {
	if firstPage > 0 && !c.Registration().Has(enginewire.FeatureCommitFirstPage) {
		return CommitResult{}, errcode.New(errcode.NotSupportedYet, "commit from page %d: the host does not announce %s; commit every page's slot from the root", firstPage, enginewire.FeatureCommitFirstPage)
	}
	var resp *pb.CommitResponse
	err := c.call(ctx, false, func(reg string) (err error) {
		resp, err = c.rpc.Commit(ctx, &pb.CommitRequest{RegistrationId: reg, RequestId: requestID, Tokens: tokens, PageSlots: pageSlots, FirstPage: uint32(firstPage)}, waitReady)
		return err
	})
	if err != nil {
		return CommitResult{}, err
	}
	return CommitResult{Stored: int(resp.GetStored()), Present: int(resp.GetPresent()), BlockHashes: resp.GetBlockHashes()}, nil
}

// CommitPart records part's (1..Options.Parts) slice of the pages from
// firstPage as written into the slots AllocatePart gave; the last part's
// commit caches them. It needs enginewire.FeatureCommitParts.
func (c *Client) CommitPart(ctx context.Context, requestID string, tokens []uint32, firstPage int, pageSlots []uint32, part int) (CommitResult, error) {
	if !c.Registration().Has(enginewire.FeatureCommitParts) {
		return CommitResult{}, errcode.New(errcode.NotSupportedYet, "commit for part %d: the host does not announce %s; register one process per engine", part, enginewire.FeatureCommitParts)
	}
	var resp *pb.CommitResponse
	err := c.call(ctx, false, func(reg string) (err error) {
		resp, err = c.rpc.Commit(ctx, &pb.CommitRequest{RegistrationId: reg, RequestId: requestID, Tokens: tokens, PageSlots: pageSlots,
			FirstPage: uint32(firstPage), Part: uint32(part)}, waitReady)
		return err
	})
	if err != nil {
		return CommitResult{}, err
	}
	return CommitResult{Stored: int(resp.GetStored()), Present: int(resp.GetPresent()), BlockHashes: resp.GetBlockHashes(),
		PartsWaiting: int(resp.GetPartsWaiting())}, nil
}

// Release ends a request; it returns the unused slots the host freed.
func (c *Client) Release(ctx context.Context, requestID string) (int, error) {
	var resp *pb.ReleaseResponse
	err := c.call(ctx, false, func(reg string) (err error) {
		resp, err = c.rpc.Release(ctx, &pb.ReleaseRequest{RegistrationId: reg, RequestId: requestID}, waitReady)
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(resp.GetFreedSlots()), nil
}

// Usage is a finished request's token accounting.
type Usage struct {
	InputTokens, CachedTokens, OutputTokens, ReasoningTokens int
}

// FinishRequest ends a request with its usage and cache_control.
type FinishRequest struct {
	RequestID string
	Usage     Usage
	// CacheControl, or CacheControlJSON (a request body in the Anthropic
	// or nvext form; see enginewire.ParseCacheControlJSON).
	CacheControl     *enginewire.CacheControl
	CacheControlJSON string
}

// FinishResult reports a finish.
type FinishResult struct {
	FreedSlots                int
	Pinned                    bool
	PinnedBlocks, TotalBlocks int
	TTL                       time.Duration
	// PinError says why the pin failed (budget, quota); the request
	// finished anyway.
	PinError *errcode.Error
}

// Finish ends the request; an ephemeral cache_control pins its cached
// prefix for the TTL.
func (c *Client) Finish(ctx context.Context, r FinishRequest) (FinishResult, error) {
	req := &pb.FinishRequest{RequestId: r.RequestID, CacheControlJson: r.CacheControlJSON, Usage: &pb.Usage{
		InputTokens: uint64(r.Usage.InputTokens), CachedTokens: uint64(r.Usage.CachedTokens),
		OutputTokens: uint64(r.Usage.OutputTokens), ReasoningTokens: uint64(r.Usage.ReasoningTokens)}}
	if cc := r.CacheControl; cc != nil && cc.Present() {
		req.CacheControl = &pb.CacheControl{Type: cc.Type}
		if cc.TTL > 0 {
			req.CacheControl.Ttl = cc.TTL.String()
		}
	}
	var resp *pb.FinishResponse
	err := c.call(ctx, false, func(reg string) (err error) {
		req.RegistrationId = reg
		resp, err = c.rpc.Finish(ctx, req, waitReady)
		return err
	})
	if err != nil {
		return FinishResult{}, err
	}
	out := FinishResult{FreedSlots: int(resp.GetFreedSlots()), Pinned: resp.GetPinned(), PinnedBlocks: int(resp.GetPinnedBlocks()),
		TotalBlocks: int(resp.GetTotalBlocks()), TTL: time.Duration(resp.GetTtlMs()) * time.Millisecond}
	if pe := resp.GetPinError(); pe != nil {
		out.PinError = convert.ErrorFromProto(pe)
	}
	return out, nil
}

// FillOrder is prefill work the host asks for (a splice replacement).
type FillOrder struct {
	ID              string
	Session, Tenant string
	// Position is the first token's position; the tokens' K/V go to
	// PageSlots from row FirstOffset of the first page, attending to the
	// prefix held in PrefixPageSlots.
	Position        int
	Tokens          []uint32
	PageSlots       []uint32
	FirstOffset     int
	PrefixPageSlots []uint32
}

// ServeFillOrders receives fill orders until ctx ends and runs fill for
// each, reporting its outcome to the host. Across a host restart it
// re-registers and resubscribes.
func (c *Client) ServeFillOrders(ctx context.Context, fill func(context.Context, FillOrder) error) error {
	for ctx.Err() == nil {
		reg := c.Registration()
		stream, err := c.rpc.FillOrders(ctx, &pb.FillOrdersRequest{RegistrationId: reg.ID}, waitReady)
		if err == nil {
			err = c.pumpFills(ctx, stream, reg.ID, fill)
		}
		if ctx.Err() != nil {
			return nil
		}
		e := convert.FromGRPCStatus(err)
		switch e.Code {
		case errcode.UnknownRegistration:
			if c.Registration().Generation == reg.Generation {
				if rerr := c.register(ctx, reg.Generation); rerr != nil {
					return rerr
				}
				if cb := c.o.OnReregister; cb != nil {
					cb(c.Registration())
				}
			}
		case errcode.Unavailable:
		default:
			return e
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func (c *Client) pumpFills(ctx context.Context, stream pb.Engine_FillOrdersClient, reg string, fill func(context.Context, FillOrder) error) error {
	for {
		o, err := stream.Recv()
		if err != nil {
			return err
		}
		ferr := fill(ctx, FillOrder{ID: o.GetOrderId(), Session: o.GetSession(), Tenant: o.GetTenant(), Position: int(o.GetPosition()),
			Tokens: o.GetTokens(), PageSlots: o.GetPageSlots(), FirstOffset: int(o.GetFirstOffset()), PrefixPageSlots: o.GetPrefixPageSlots()})
		req := &pb.CompleteFillRequest{RegistrationId: reg, OrderId: o.GetOrderId(), Ok: ferr == nil}
		if ferr != nil {
			req.Error = ferr.Error()
		}
		if _, err := c.rpc.CompleteFill(ctx, req, waitReady); err != nil {
			return err
		}
	}
}
