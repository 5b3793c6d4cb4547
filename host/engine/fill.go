package engine

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// FillOrder is the splicer's order (splice.FillOrder): the replacement
// tokens a splice needs prefilled, and on an engine that recomputes, the
// kept tokens to prefill again.
type FillOrder = splice.FillOrder

// FillResult is the engine's report of a completed order.
type FillResult = splice.FillResult

// PendingFill is a fill order on its way to the engine, or waiting for the
// engine to complete it.
type PendingFill struct {
	ID    string
	Order FillOrder
	done  chan fillDone // buffered: the first result wins
}

type fillDone struct {
	res FillResult
	err error
}

// Fail completes the order with err (its stream could not send it).
func (p *PendingFill) Fail(err error) { p.finish(FillResult{}, err) }

func (p *PendingFill) finish(res FillResult, err error) {
	select {
	case p.done <- fillDone{res, err}:
	default:
	}
}

// fillHub queues fill orders for the engine's stream and matches its
// completions to the waiting callers.
type fillHub struct {
	mu      sync.Mutex
	queue   chan *PendingFill
	waiting map[string]*PendingFill
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
	return &fillHub{queue: make(chan *PendingFill, 1024), waiting: map[string]*PendingFill{}, closed: make(chan struct{}), opened: make(chan struct{})}
}

// closeAll ends the streams of a retired registration and fails what waits.
func (h *fillHub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.closed)
	h.closed = make(chan struct{})
	for id, p := range h.waiting {
		p.finish(FillResult{}, errcode.New(errcode.Unavailable, "fill order %s: the engine's registration ended", id))
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
// A sparse order goes only to an engine that registered recompute.
func (s *Service) Fill(ctx context.Context, o FillOrder) (FillResult, error) {
	s.mu.Lock()
	live := s.reg != nil
	recomputes := live && s.reg.recompute
	s.stats.FillOrders++
	s.mu.Unlock()
	if !live {
		return FillResult{}, errcode.New(errcode.Unavailable, "no engine is registered to fill")
	}
	if (len(o.Positions) > 0 || o.Candidates != nil) && !recomputes {
		return FillResult{}, errcode.New(errcode.RecomputeUnsupported, "the engine did not register recompute: it serves no sparse fill orders")
	}
	h := s.fills
	h.mu.Lock()
	if err := h.awaitStream(ctx); err != nil {
		return FillResult{}, err
	}
	h.next++
	id := "f" + strconv.FormatUint(h.next, 10)
	p := &PendingFill{ID: id, Order: o, done: make(chan fillDone, 1)}
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
		return FillResult{}, errcode.Wrap(errcode.DeadlineExceeded, ctx.Err(), "fill order %s not taken by the engine", id)
	}
	select {
	case d := <-p.done:
		return d.res, d.err
	case <-ctx.Done():
		return FillResult{}, errcode.Wrap(errcode.DeadlineExceeded, ctx.Err(), "fill order %s not completed", id)
	}
}

// FillStream is one of the engine's open streams of fill orders.
type FillStream struct {
	h      *fillHub
	regID  string
	closed <-chan struct{}
}

// OpenFillStream opens a stream of fill orders for the live registration
// regID; Close it when the stream ends.
func (s *Service) OpenFillStream(regID string) (*FillStream, error) {
	s.mu.Lock()
	_, err := s.registrationOf(regID)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	h := s.fills
	h.mu.Lock()
	defer h.mu.Unlock()
	f := &FillStream{h: h, regID: regID, closed: h.closed}
	h.streams++
	close(h.opened)
	h.opened = make(chan struct{})
	return f, nil
}

// Close ends the stream.
func (f *FillStream) Close() {
	f.h.mu.Lock()
	f.h.streams--
	f.h.mu.Unlock()
}

// Next waits for the next order to send: nil when ctx ends, an error when
// the registration ended.
func (f *FillStream) Next(ctx context.Context) (*PendingFill, error) {
	select {
	case <-ctx.Done():
		return nil, nil
	case <-f.closed:
		return nil, errcode.New(errcode.UnknownRegistration, "registration %.40q ended", f.regID)
	case p := <-f.h.queue:
		return p, nil
	}
}

// CompleteFill reports the engine's outcome of fill order id: done when
// ok (with what it recomputed), or failed for why.
func (s *Service) CompleteFill(regID, id string, ok bool, why string, res FillResult) error {
	s.mu.Lock()
	_, err := s.registrationOf(regID)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	h := s.fills
	h.mu.Lock()
	p := h.waiting[id]
	delete(h.waiting, id)
	h.mu.Unlock()
	if p == nil {
		return errcode.New(errcode.UnknownRequest, "fill order %.64q is not waiting", id)
	}
	if !ok {
		p.finish(FillResult{}, errcode.New(errcode.Unavailable, "the engine could not fill order %s: %.200s", id, why))
		return nil
	}
	p.finish(res, nil)
	return nil
}

// EndFillStreams ends the engine's fill streams and fails the orders that
// wait, as the host stops.
func (s *Service) EndFillStreams() { s.fills.closeAll() }
