// Package convert translates between the public Go types (sdk/directive,
// sdk/errcode) and the generated kvpilot.v1 protobuf messages. Keeping the
// conversions here lets sdk/directive stay free of protobuf, and keeps each
// direction in one short file: toproto.go and fromproto.go.
package convert

import (
	"github.com/kvpilot/kvpilot/sdk/directive"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

func hashesToProto(hs []directive.Hash) []uint64 {
	if hs == nil {
		return nil
	}
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = uint64(h)
	}
	return out
}

func hashesFromProto(hs []uint64) []directive.Hash {
	if hs == nil {
		return nil
	}
	out := make([]directive.Hash, len(hs))
	for i, h := range hs {
		out[i] = directive.Hash(h)
	}
	return out
}

var tierNames = map[pb.Tier]directive.TierName{
	pb.Tier_TIER_DEVICE: "device",
	pb.Tier_TIER_HOST:   "host",
	pb.Tier_TIER_DISK:   "disk",
	pb.Tier_TIER_REMOTE: "remote",
}
