package directive

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// wireCodec reads and writes one verb's JSON object, {"type":"Cache",...},
// from its Go struct alone.
//
// Both directions go through struct types built with reflect.StructOf: the
// "type" tag first, then a copy of the verb's fields. The copies carry no
// methods, so encoding/json flattens them beside the tag instead of calling
// the verb's own MarshalJSON (which is this encoder). On the decoding side,
// fields tagged wire:"required" become pointers, so an absent field is told
// apart from a zero one: Cache.pin false would unpin, Splice.start 0 would
// cut from the beginning.
type wireCodec struct {
	verb     Verb
	goType   reflect.Type
	in, out  reflect.Type
	required []bool          // by field of goType
	missing  string          // the error detail naming every required field
	keys     map[string]bool // the object's member names, "type" included
}

func newWireCodec(v Verb, t reflect.Type) *wireCodec {
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("directive: verb %s: %v is not a struct", v, t))
	}
	tag := reflect.StructField{Name: "Type", Type: reflect.TypeOf(v), Tag: `json:"type"`}
	in, out := []reflect.StructField{tag}, []reflect.StructField{tag}
	c := &wireCodec{verb: v, goType: t, required: make([]bool, t.NumField()), keys: map[string]bool{"type": true}}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Anonymous || f.Name == tag.Name {
			panic(fmt.Sprintf("directive: verb %s: field %s must be a plain exported field", v, f.Name))
		}
		if name := jsonName(f); name != "-" {
			c.keys[name] = true
		}
		plain := reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag}
		out = append(out, plain)
		if f.Tag.Get("wire") == "required" {
			c.required[i] = true
			names = append(names, string(v)+"."+jsonName(f))
			plain.Type = reflect.PointerTo(f.Type)
		}
		in = append(in, plain)
	}
	c.in, c.out = reflect.StructOf(in), reflect.StructOf(out)
	c.missing = joinNames(names)
	return c
}

// decode decodes data strictly into dst, a settable value of the verb's type.
func (c *wireCodec) decode(data []byte, dst reflect.Value) error {
	w := reflect.New(c.in)
	if err := decodeKnown(data, w.Interface(), c.keys, false); err != nil {
		return err
	}
	w = w.Elem()
	if Verb(w.Field(0).String()) != c.verb {
		// Only typeTag's guess can disagree with the decoded tag (a
		// duplicate "type" member); the general path then decides.
		return errcode.New(errcode.BadRequest, "type %s is not %s", quoteShort(w.Field(0).String()), c.verb)
	}
	for i, req := range c.required {
		f := w.Field(i + 1)
		if req {
			if f.IsNil() {
				return missing(c.missing)
			}
			f = f.Elem()
		}
		dst.Field(i).Set(f)
	}
	return nil
}

// encode writes d, a value of the verb's type, with its "type" tag.
func (c *wireCodec) encode(d reflect.Value) ([]byte, error) {
	w := reflect.New(c.out).Elem()
	w.Field(0).Set(reflect.ValueOf(c.verb))
	for i := range c.required {
		w.Field(i + 1).Set(d.Field(i))
	}
	return json.Marshal(w.Addr().Interface())
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}

// joinNames writes "a", "a and b", or "a, b and c".
func joinNames(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
