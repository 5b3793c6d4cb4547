package policy

import (
	"encoding/json"
	"fmt"

	"github.com/kvpilot/kvpilot/sdk/directive"

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

// replyToProto encodes one observation's answer: each directive typed, or
// as its JSON object for a host that did not ask for typed directives.
func replyToProto(ds []Directive, err error, typed bool) (*pb.Reply, error) {
	if err != nil {
		return &pb.Reply{Error: err.Error()}, nil
	}
	r := &pb.Reply{}
	scoped := false
	tenants := make([]string, len(ds))
	for i, d := range ds {
		tenants[i], d = Unwrap(d)
		scoped = scoped || tenants[i] != ""
		if d == nil {
			return &pb.Reply{Error: fmt.Sprintf("directive %d is nil", i)}, nil
		}
		if err := appendDirective(r, d, typed); err != nil {
			return nil, fmt.Errorf("encode directive %d (%s): %w", i, d.Verb(), err)
		}
	}
	if scoped {
		r.Tenants = tenants
	}
	return r, nil
}

func appendDirective(r *pb.Reply, d Directive, typed bool) error {
	if !typed {
		b, err := json.Marshal(d)
		r.DirectivesJson = append(r.DirectivesJson, b)
		return err
	}
	m := directive.ToProto(d)
	if m == nil {
		return fmt.Errorf("verb %s has no typed form", d.Verb())
	}
	r.Directives = append(r.Directives, m)
	return nil
}
