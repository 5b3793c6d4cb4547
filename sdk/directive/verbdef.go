package directive

import (
	"fmt"
	"reflect"

	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// A verb is defined once, in its own file (verb_<name>.go): its Go type,
// its Validate, and a verbSpec that gives its proto conversions. Everything
// else is derived from the type here: the strict JSON decoder, the encoder
// that adds the "type" tag, the span/block family and the verb lists. Adding
// a verb is that file, one line in defs, and the proto message.

// verbSpec is the part of a verb's definition that cannot be derived from
// its Go type.
type verbSpec[T Directive] struct {
	span      bool // addresses token positions of a session, not blocks by hash
	toProto   func(T) *pb.Directive
	fromProto func(*pb.Directive) (T, error)
}

// def is one verb's definition with the type erased, as the dispatchers
// below use it.
type def struct {
	verb      Verb
	span      bool
	codec     *wireCodec
	decode    func(data []byte) (Directive, error)
	toProto   func(Directive) *pb.Directive
	fromProto func(*pb.Directive) (Directive, error)
}

// define builds T's definition. It panics on a malformed type, which is a
// programming error that any test run of this package reports.
func define[T Directive](s verbSpec[T]) *def {
	var zero T
	v := zero.Verb()
	c := newWireCodec(v, reflect.TypeOf(zero))
	return &def{
		verb:  v,
		span:  s.span,
		codec: c,
		decode: func(data []byte) (Directive, error) {
			var d T
			if err := c.decode(data, reflect.ValueOf(&d).Elem()); err != nil {
				return nil, err
			}
			return d, nil
		},
		toProto: func(d Directive) *pb.Directive { return s.toProto(d.(T)) },
		fromProto: func(m *pb.Directive) (Directive, error) {
			d, err := s.fromProto(m)
			if err != nil {
				return nil, err
			}
			return d, nil
		},
	}
}

// defs is every verb in wire order: block verbs, then span verbs, as the
// proto oneof numbers them. Verbs, Known, IsSpan and every decoder follow it.
var defs = []*def{
	warmDef, pruneDef, cacheDef, thinkDef, pauseDef, renewLeaseDef, revokeLeaseDef,
	spliceDef, pinDef, retainDef, evictDef, resumeDef, shareDef,
}

var byVerb = func() map[Verb]*def {
	m := make(map[Verb]*def, len(defs))
	for _, d := range defs {
		if m[d.verb] != nil {
			panic(fmt.Sprintf("directive: verb %s defined twice", d.verb))
		}
		m[d.verb] = d
	}
	return m
}()

// Verbs lists every verb, block verbs first, in wire order.
var Verbs = func() []Verb {
	vs := make([]Verb, len(defs))
	for i, d := range defs {
		vs[i] = d.verb
	}
	return vs
}()

// Known reports whether v is one of Verbs.
func (v Verb) Known() bool { return byVerb[v] != nil }

// IsSpan reports whether v addresses token positions of a session rather
// than blocks by hash.
func (v Verb) IsSpan() bool {
	d := byVerb[v]
	return d != nil && d.span
}

// encodeAs is the MarshalJSON of every verb type: its fields beside the
// "type" tag.
func encodeAs(d Directive) ([]byte, error) {
	def := byVerb[d.Verb()]
	if def == nil {
		return nil, fmt.Errorf("directive: verb %q has no definition", d.Verb())
	}
	return def.codec.encode(reflect.ValueOf(d))
}
