package engine

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// FillOrder asks the engine to prefill Tokens at positions
// [Position, Position+len(Tokens)) of a session, attending to the prefix in
// PrefixPageSlots, writing their K/V into PageSlots from row FirstOffset of
// the first page. Splice produces these for non-empty replacements.
type FillOrder struct {
	Session, Tenant string
	Position        int
	Tokens          []uint32
	PageSlots       []uint32
	FirstOffset     int
	PrefixPageSlots []uint32
}

type pendingFill struct {
	order *pb.FillOrder
	done  chan error // buffered: the first result wins
}

func (p *pendingFill) finish(err error) {
	select {
	case p.done <- err:
	default:
	}
}

// fillHub queues fill orders for the engine's stream and matches its
// completions to the waiting callers.
type fillHub struct {
	mu      sync.Mutex
	queue   chan *pendingFill
	waiting map[string]*pendingFill
	closed  chan struct{} // closed to end the current streams
	next    uint64
	// streams counts the engine's open FillOrders streams: with none for
	// streamWait, a fill fails instead of waiting for its caller's
	// deadline (a Match running session diff would stall on an engine that
	// serves no fills). opened is closed when a stream opens.
	streams int
	opened  chan struct{}
}

// streamWait is how long a fill waits for the engine to open its stream
// (it may be registering right now).
const streamWait = 2 * time.Second

// awaitStream waits until a stream is open; h.mu is held on entry and on
// a nil return.
func (h *fillHub) awaitStream(ctx context.Context) error {
	var timer *time.Timer
	for h.streams == 0 {
		if timer == nil {
			timer = time.NewTimer(streamWait)
			defer timer.Stop()
		}
		wait := h.opened
		h.mu.Unlock()
		select {
		case <-wait:
		case <-timer.C:
			return errcode.New(errcode.Unavailable, "the engine has no FillOrders stream open: it does not serve fill orders")
		case <-ctx.Done():
			return errcode.Wrap(errcode.DeadlineExceeded, ctx.Err(), "waiting for the engine's fill stream")
		}
		h.mu.Lock()
	}
	return nil
}

func newFillHub() *fillHub {
	return &fillHub{queue: make(chan *pendingFill, 1024), waiting: map[string]*pendingFill{}, closed: make(chan struct{}), opened: make(chan struct{})}
}

// closeAll ends the streams of a retired registration and fails what waits.
func (h *fillHub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.closed)
	h.closed = make(chan struct{})
	for id, p := range h.waiting {
		p.finish(errcode.New(errcode.Unavailable, "fill order %s: the engine's registration ended", id))
		delete(h.waiting, id)
	}
	for {
		select {
		case <-h.queue:
		default:
			return
		}
	}
}

// Fill sends o to the registered engine's fill stream and waits until the
// engine reports it done (CompleteFill), ctx ends, or the registration ends.
func (s *Service) Fill(ctx context.Context, o FillOrder) error {
	s.mu.Lock()
	live := s.reg != nil
	s.stats.FillOrders++
	s.mu.Unlock()
	if !live {
		return errcode.New(errcode.Unavailable, "no engine is registered to fill")
	}
	h := s.fills
	h.mu.Lock()
	if err := h.awaitStream(ctx); err != nil {
		return err
	}
	h.next++
	id := "f" + strconv.FormatUint(h.next, 10)
	p := &pendingFill{done: make(chan error, 1), order: &pb.FillOrder{
		OrderId: id, Session: o.Session, Tenant: o.Tenant, Position: uint32(o.Position), Tokens: o.Tokens,
		PageSlots: o.PageSlots, FirstOffset: uint32(o.FirstOffset), PrefixPageSlots: o.PrefixPageSlots,
	}}
	h.waiting[id] = p
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.waiting, id)
		h.mu.Unlock()
	}()
	select {
	case h.queue <- p:
	case <-ctx.Done():
		return errcode.Wrap(errcode.DeadlineExceeded, ctx.Err(), "fill order %s not taken by the engine", id)
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return errcode.Wrap(errcode.DeadlineExceeded, ctx.Err(), "fill order %s not completed", id)
	}
}

// FillOrders implements kvpilot.v1.Engine: the engine's stream of orders.
func (s *Service) FillOrders(req *pb.FillOrdersRequest, stream pb.Engine_FillOrdersServer) error {
	s.mu.Lock()
	_, err := s.registrationOf(req.GetRegistrationId())
	s.mu.Unlock()
	if err != nil {
		return status(err)
	}
	h := s.fills
	h.mu.Lock()
	closed := h.closed
	h.streams++
	close(h.opened)
	h.opened = make(chan struct{})
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.streams--
		h.mu.Unlock()
	}()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-closed:
			return status(errcode.New(errcode.UnknownRegistration, "registration %.40q ended", req.GetRegistrationId()))
		case p := <-h.queue:
			if err := stream.Send(p.order); err != nil {
				p.finish(errcode.Wrap(errcode.Unavailable, err, "send fill order %s", p.order.GetOrderId()))
				return err
			}
		}
	}
}

// CompleteFill implements kvpilot.v1.Engine.
func (s *Service) CompleteFill(ctx context.Context, req *pb.CompleteFillRequest) (*pb.CompleteFillResponse, error) {
	s.mu.Lock()
	_, err := s.registrationOf(req.GetRegistrationId())
	s.mu.Unlock()
	if err != nil {
		return nil, status(err)
	}
	h := s.fills
	h.mu.Lock()
	p := h.waiting[req.GetOrderId()]
	delete(h.waiting, req.GetOrderId())
	h.mu.Unlock()
	if p == nil {
		return nil, status(errcode.New(errcode.UnknownRequest, "fill order %.64q is not waiting", req.GetOrderId()))
	}
	var res error
	if !req.GetOk() {
		res = errcode.New(errcode.Unavailable, "the engine could not fill order %s: %.200s", req.GetOrderId(), req.GetError())
	}
	p.finish(res)
	return &pb.CompleteFillResponse{}, nil
}
