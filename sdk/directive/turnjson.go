package directive

import "encoding/json"

// AppendJSON appends t encoded exactly as json.Marshal encodes it. The
// envelope is written directly and each directive by its own MarshalJSON,
// where json.Marshal would walk the Turn by reflection and then re-scan
// every directive's output; a NATS client sends every turn this way.
// FuzzTurnJSONAgrees holds the two together.
func (t Turn) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	for _, f := range [...]struct{ key, v string }{{`"id":`, t.ID}, {`"source":`, t.Source}, {`"tenant":`, t.Tenant}} {
		if f.v != "" {
			b = append(b, f.key...)
			b = appendString(b, f.v)
			b = append(b, ',')
		}
	}
	b = append(b, `"directives":`...)
	if t.Directives == nil {
		return append(b, "null}"...), nil
	}
	b = append(b, '[')
	for i, d := range t.Directives {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendDirective(b, d); err != nil {
			return nil, err
		}
	}
	return append(b, "]}"...), nil
}

// appendDirective appends d's MarshalJSON output as it is when json.Marshal
// would leave it so (compact, nothing to escape), else json.Marshal(d).
func appendDirective(b []byte, d Directive) ([]byte, error) {
	if m, ok := d.(json.Marshaler); ok && m != nil {
		if out, err := m.MarshalJSON(); err == nil && plainJSON(out) {
			return append(b, out...), nil
		}
	}
	return appendMarshaled(b, d)
}
