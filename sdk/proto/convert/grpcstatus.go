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

// FromGRPCStatus recovers the registry code from a status error written by
// GRPCStatus: the message starts with the code (optionally after
// "directive N: "). Other errors read as unavailable or internal by their
// gRPC code.
func FromGRPCStatus(err error) *errcode.Error {
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err)
	msg := st.Message()
	for _, ent := range errcode.All() {
		prefix := string(ent.Code) + ": "
		if hasPrefixAfterIndex(msg, prefix) {
			return &errcode.Error{Code: ent.Code, Detail: msg, Index: -1}
		}
	}
	code := errcode.Internal
	switch st.Code() {
	case codes.Unavailable, codes.Canceled:
		code = errcode.Unavailable
	case codes.DeadlineExceeded:
		code = errcode.DeadlineExceeded
	case codes.PermissionDenied, codes.Unauthenticated:
		code = errcode.PermissionDenied
	case codes.ResourceExhausted:
		code = errcode.RateLimited
	}
	return &errcode.Error{Code: code, Detail: msg, Index: -1}
}

func hasPrefixAfterIndex(msg, prefix string) bool {
	if len(msg) >= len(prefix) && msg[:len(prefix)] == prefix {
		return true
	}
	// "directive N: code: ..."
	const d = "directive "
	if len(msg) > len(d) && msg[:len(d)] == d {
		for i := len(d); i < len(msg); i++ {
			if msg[i] == ':' {
				rest := msg[i+1:]
				if len(rest) > 0 && rest[0] == ' ' {
					rest = rest[1:]
				}
				return len(rest) >= len(prefix) && rest[:len(prefix)] == prefix
			}
		}
	}
	return false
}
