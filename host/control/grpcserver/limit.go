package grpcserver

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/host/control"
	"github.com/kvpilot/kvpilot/host/rpcpeer"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Every Control call, and every WatchEvents stream it opens, takes a token
// from its peer uid's bucket (control.rate_limit, control.rate_burst), so
// one runaway client cannot starve the routers and operators sharing the
// socket. The uid, read from SO_PEERCRED, is the one identity on the
// socket a client cannot choose.
//
// Apply and CacheControl answer past the limit as the NATS command plane
// does, in the response (ok false, or status "error", with rate_limited),
// so a caller of controlclient.Client sees the same on both transports.
// Stats and WatchEvents, which only the socket serves, answer with a
// RESOURCE_EXHAUSTED status carrying the registry code. A refused call is
// not audited: nothing was attempted, and a flood must not flood the audit
// log too.

// rateKey is the limiter's source for a peer: its uid, or "uid=?" outside
// a socket connection.
func rateKey(ctx context.Context) (string, int) {
	if p, ok := rpcpeer.Of(ctx); ok {
		return "uid=" + strconv.Itoa(p.UID), p.UID
	}
	return "uid=?", -1
}

// rateLimited is the error of a call refused by the limiter: the detail
// names the uid, the limit and when to retry.
func (s *Server) rateLimited(uid int, retry time.Duration) *errcode.Error {
	return errcode.New(errcode.RateLimited, "uid %d is past control.rate_limit (%v); retry in %v",
		uid, s.limiter, max(retry, time.Millisecond).Round(time.Millisecond))
}

// limitUnary refuses unary calls past their uid's limit.
func (s *Server) limitUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	key, uid := rateKey(ctx)
	ok, retry := s.limiter.Allow(key)
	if ok {
		return handler(ctx, req)
	}
	s.cfg.Recorder.RateLimited(control.TransportSocket)
	e := s.rateLimited(uid, retry)
	switch req := req.(type) {
	case *pb.ApplyRequest:
		return convert.TurnReplyToProto(s.refusedTurn(req, e)), nil
	case *pb.CacheControlRequest:
		return convert.CacheControlReplyToProto(directive.ErrorReply(e, directive.WorkerID(s.worker))), nil
	}
	return nil, convert.GRPCStatus(e)
}

// limitStream refuses opening a stream past the uid's limit; a stream
// already open is not limited (it costs the host one send per event).
func (s *Server) limitStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	key, uid := rateKey(ss.Context())
	if ok, retry := s.limiter.Allow(key); !ok {
		s.cfg.Recorder.RateLimited(control.TransportSocket)
		return convert.GRPCStatus(s.rateLimited(uid, retry))
	}
	return handler(srv, ss)
}

// refusedTurn answers a turn refused as a whole before the executor saw
// it: every directive carries the turn's error. A turn that does not
// convert is answered without per-directive results.
func (s *Server) refusedTurn(req *pb.ApplyRequest, e *errcode.Error) directive.TurnReply {
	r := directive.TurnReply{Status: directive.StatusError, TurnID: req.GetTurnId(), Error: e,
		WorkerID: directive.WorkerID(s.worker), Results: []directive.Result{}}
	t, err := convert.TurnFromApply(req, s.limits)
	if err != nil {
		return r
	}
	r.Results = make([]directive.Result, len(t.Directives))
	for i, d := range t.Directives {
		r.Results[i] = directive.Result{Index: i, Verb: d.Verb(), Status: directive.StatusError, Error: e.At(i)}
	}
	return r
}
