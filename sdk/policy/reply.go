package policy

import (
	"encoding/json"
	"fmt"

	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// These encode the plugin's side of the wire: its subscriptions and its
// answers. The host's side (decoding them) is in pluginwire.

func kindsToProto(ks []Kind) []pb.Kind {
	out := make([]pb.Kind, len(ks))
	for i, k := range ks {
		out[i] = pb.Kind(k)
	}
	return out
}

// replyToProto encodes one observation's answer.
func replyToProto(ds []Directive, err error) (*pb.Reply, error) {
	if err != nil {
		return &pb.Reply{Error: err.Error()}, nil
	}
	r := &pb.Reply{DirectivesJson: make([][]byte, 0, len(ds))}
	scoped := false
	tenants := make([]string, len(ds))
	for i, d := range ds {
		tenants[i], d = Unwrap(d)
		scoped = scoped || tenants[i] != ""
		if d == nil {
			return &pb.Reply{Error: fmt.Sprintf("directive %d is nil", i)}, nil
		}
		b, err := json.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("encode directive %d (%s): %w", i, d.Verb(), err)
		}
		r.DirectivesJson = append(r.DirectivesJson, b)
	}
	if scoped {
		r.Tenants = tenants
	}
	return r, nil
}
