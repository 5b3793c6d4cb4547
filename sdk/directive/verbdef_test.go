package directive

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Every oneof field of kvpilot.v1.Directive is one defined verb, in the
// same order as defs, so Verbs follows the wire's numbering.
func TestEveryProtoVerbIsDefined(t *testing.T) {
	fields := verbOneof.Fields()
	if fields.Len() != len(defs) {
		t.Fatalf("proto oneof has %d verbs, defs has %d", fields.Len(), len(defs))
	}
	for i := range fields.Len() {
		fd := fields.Get(i)
		d := byProtoField[fd.Name()]
		if d == nil {
			t.Errorf("proto verb %s has no definition", fd.Name())
			continue
		}
		if d != defs[i] {
			t.Errorf("proto verb %s is number %d but defs[%d] is %s", fd.Name(), fd.Number(), i, defs[i].verb)
		}
		if got := string(d.verb); protoreflect.Name(snakeCase(got)) != fd.Name() {
			t.Errorf("verb %s does not name its proto field %s", got, fd.Name())
		}
	}
}

// A zero message of each verb converts to the verb: the dispatcher finds
// the definition whether or not the inner message is set.
func TestFromProtoDispatchesEveryVerb(t *testing.T) {
	for _, d := range defs {
		zero := reflect.New(d.codec.goType).Elem().Interface().(Directive)
		m := ToProto(zero)
		got, err := FromProto(m)
		if err != nil {
			t.Errorf("%s: %v", d.verb, err)
			continue
		}
		if got.Verb() != d.verb {
			t.Errorf("%s came back as %s", d.verb, got.Verb())
		}
	}
}

// Each verb's JSON is its fields beside "type", and a field tagged
// required is refused when absent, naming every required field.
func TestRequiredFieldsAreRefusedWhenAbsent(t *testing.T) {
	for _, d := range defs {
		zero := reflect.New(d.codec.goType).Elem().Interface().(Directive)
		b, err := json.Marshal(zero)
		if err != nil {
			t.Fatalf("%s: %v", d.verb, err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		if string(obj["type"]) != `"`+string(d.verb)+`"` {
			t.Errorf("%s encodes type %s", d.verb, obj["type"])
		}
		back, err := DecodeCommand(b, Limits{})
		if err != nil || !reflect.DeepEqual(back, zero) {
			t.Errorf("%s: %s decodes to %#v, %v", d.verb, b, back, err)
		}
		for i, req := range d.codec.required {
			if !req {
				continue
			}
			name := jsonName(d.codec.goType.Field(i))
			without := map[string]json.RawMessage{}
			for k, v := range obj {
				if k != name {
					without[k] = v
				}
			}
			wb, _ := json.Marshal(without)
			_, err := DecodeCommand(wb, Limits{})
			e, ok := errcode.As(err)
			if !ok || e.Code != errcode.MissingField || !strings.Contains(e.Detail, string(d.verb)+"."+name) {
				t.Errorf("%s without %s: %v", d.verb, name, err)
			}
		}
	}
}
