package convert

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// The registry keeps gRPC codes as numbers; they must be real codes, and
// the groups must travel as the right ones.
func TestRegistryGRPCCodes(t *testing.T) {
	want := map[errcode.Code]codes.Code{
		errcode.BadRequest:         codes.InvalidArgument,
		errcode.UnknownBlock:       codes.NotFound,
		errcode.LeaseExists:        codes.AlreadyExists,
		errcode.PinBudgetExhausted: codes.ResourceExhausted,
		errcode.RateLimited:        codes.ResourceExhausted,
		errcode.PermissionDenied:   codes.PermissionDenied,
		errcode.NotSupportedYet:    codes.Unimplemented,
		errcode.TurnAborted:        codes.Aborted,
		errcode.BlockLocked:        codes.FailedPrecondition,
		errcode.Unavailable:        codes.Unavailable,
		errcode.DeadlineExceeded:   codes.DeadlineExceeded,
		errcode.Internal:           codes.Internal,
	}
	for _, ent := range errcode.All() {
		c := codes.Code(ent.GRPC)
		if strings.HasPrefix(c.String(), "Code(") || c == codes.OK {
			t.Errorf("%s: %d is not a gRPC error code", ent.Code, ent.GRPC)
		}
		if w, ok := want[ent.Code]; ok && c != w {
			t.Errorf("%s travels as %v, want %v", ent.Code, c, w)
		}
	}
}

func TestGRPCStatusRoundTrip(t *testing.T) {
	e := errcode.New(errcode.RateLimited, "source nats:x").At(2)
	err := GRPCStatus(e)
	back := FromGRPCStatus(err)
	if back.Code != errcode.RateLimited || !errors.Is(back, errcode.ErrRateLimited) {
		t.Fatalf("back %v", back)
	}
	if GRPCStatus(nil) != nil || FromGRPCStatus(nil) != nil {
		t.Fatal("nil handling")
	}
	if got := FromGRPCStatus(errors.New("plain")); got.Code != errcode.Internal {
		t.Fatalf("plain error read as %v", got)
	}
}
