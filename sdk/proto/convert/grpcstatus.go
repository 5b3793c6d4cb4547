package convert

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// GRPCCode is the gRPC status code a registry error travels under.
func GRPCCode(e *errcode.Error) codes.Code { return codes.Code(e.GRPCCode()) }

// GRPCStatus turns a registry error into a gRPC status error, for the
// failures that are the transport's (permission, rate limit, deadline)
// rather than a directive's. Its message is the error's full text; clients
// that need the code read it back with FromGRPCStatus.
func GRPCStatus(e *errcode.Error) error {
	if e == nil {
		return nil
	}
	return status.Error(GRPCCode(e), e.Error())
}

// FromGRPCStatus recovers the registry error from a status error written
// by GRPCStatus; any other error reads by its gRPC code (errcode.FromStatus).
func FromGRPCStatus(err error) *errcode.Error {
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err)
	return errcode.FromStatus(uint32(st.Code()), st.Message())
}
