package grpcserver

import (
	"context"

	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// FillOrders implements kvpilot.v1.Engine: the engine's stream of fill
// orders, the prefill work splice replacements need.
func (s *Server) FillOrders(req *pb.FillOrdersRequest, stream pb.Engine_FillOrdersServer) error {
	f, err := s.eng.OpenFillStream(req.GetRegistrationId())
	if err != nil {
		return status(err)
	}
	defer f.Close()
	for {
		p, err := f.Next(stream.Context())
		switch {
		case err != nil:
			return status(err)
		case p == nil:
			return nil
		}
		err = stream.Send(fillToProto(p.ID, p.Order))
		if err != nil {
			p.Fail(errcode.Wrap(errcode.Unavailable, err, "send fill order %s", p.ID))
			return err
		}
	}
}

func fillToProto(id string, o engine.FillOrder) *pb.FillOrder {
	m := &pb.FillOrder{OrderId: id, Session: o.Session, Tenant: o.Tenant, Position: uint32(o.Position), Tokens: o.Tokens,
		PageSlots: o.PageSlots, FirstOffset: uint32(o.FirstOffset), PrefixPageSlots: o.PrefixPageSlots, Positions: o.Positions}
	if c := o.Candidates; c != nil {
		m.Candidates = &pb.RecomputeCandidates{Positions: c.Positions, Tokens: c.Tokens, Share: c.Share, MaxKl: c.MaxKL, Region: uint32(c.Region), Echo: c.Echo}
	}
	return m
}

// CompleteFill implements kvpilot.v1.Engine.
func (s *Server) CompleteFill(_ context.Context, req *pb.CompleteFillRequest) (*pb.CompleteFillResponse, error) {
	res := engine.FillResult{Recomputed: int(req.GetRecomputed()), EstimatedKL: req.GetEstimatedKl()}
	if err := s.eng.CompleteFill(req.GetRegistrationId(), req.GetOrderId(), req.GetOk(), req.GetError(), res); err != nil {
		return nil, status(err)
	}
	return &pb.CompleteFillResponse{}, nil
}
