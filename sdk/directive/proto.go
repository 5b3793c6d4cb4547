package directive

import (
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
	"github.com/kvpilot/kvpilot/sdk/ttl"
)

// The typed wire form of a directive is kvpilot.v1.Directive, a oneof with
// one message per verb. The Control API and the policy plugin protocol
// both carry it; each verb's file says how its fields map.

// ToProto converts one directive; nil converts to nil.
func ToProto(d Directive) *pb.Directive {
	if d == nil {
		return nil
	}
	def := byVerb[d.Verb()]
	if def == nil {
		return nil
	}
	return def.toProto(d)
}

// FromProto converts one directive. A message with no verb set (an empty
// oneof, or a verb added by a newer peer) is unknown_verb; durations
// outside sdk/ttl's range are invalid_ttl. It decodes only: Validate and
// ValidateTurn judge the values.
func FromProto(m *pb.Directive) (Directive, error) {
	if m == nil {
		return nil, errcode.New(errcode.MissingField, "directive")
	}
	fd := m.ProtoReflect().WhichOneof(verbOneof)
	if fd == nil {
		return nil, errcode.New(errcode.UnknownVerb, "directive has no verb this host knows")
	}
	def := byProtoField[fd.Name()]
	if def == nil {
		return nil, errcode.New(errcode.UnknownVerb, "directive verb %s has no definition here", fd.Name())
	}
	return def.fromProto(m)
}

var verbOneof = (&pb.Directive{}).ProtoReflect().Descriptor().Oneofs().ByName("verb")

// byProtoField finds a verb by its oneof field, which is the verb's name in
// snake case (RenewLease is renew_lease). The package's tests hold every
// field and every verb to this.
var byProtoField = func() map[protoreflect.Name]*def {
	m := make(map[protoreflect.Name]*def, len(defs))
	for _, d := range defs {
		m[protoreflect.Name(snakeCase(string(d.verb)))] = d
	}
	return m
}()

func snakeCase(s string) string {
	out := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				out = append(out, '_')
			}
			c += 'a' - 'A'
		}
		out = append(out, c)
	}
	return string(out)
}

func hashesToProto(hs []Hash) []uint64 {
	if hs == nil {
		return nil
	}
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = uint64(h)
	}
	return out
}

func hashesFromProto(hs []uint64) []Hash {
	if hs == nil {
		return nil
	}
	out := make([]Hash, len(hs))
	for i, h := range hs {
		out[i] = Hash(h)
	}
	return out
}

// TTLToProto converts an optional TTL; nil converts to nil.
func TTLToProto(t *TTL) *durationpb.Duration {
	if t == nil {
		return nil
	}
	return durationpb.New(time.Duration(*t))
}

// TTLFromProto converts an optional duration, refusing one outside sdk/ttl's
// range with invalid_ttl naming field; nil converts to nil.
func TTLFromProto(d *durationpb.Duration, field string) (*TTL, error) {
	if d == nil {
		return nil, nil
	}
	if err := d.CheckValid(); err != nil {
		return nil, errcode.Wrap(errcode.InvalidTTL, err, "%s", field)
	}
	v := d.AsDuration()
	if v < 0 || v > ttl.Max {
		return nil, errcode.New(errcode.InvalidTTL, "%s %v: want 0 (default) up to %v", field, v, ttl.Max)
	}
	t := TTL(v)
	return &t, nil
}
