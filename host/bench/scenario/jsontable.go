package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// A report that is JSON already (a Python driver's) is read keeping the
// order its writer gave (the arms in the order they ran) and printed for
// people by one table writer, whatever its fields.

// object is a JSON object with its members in the order they came; its
// values are object, []any, string, json.Number, bool or nil.
type object []member

type member struct {
	key string
	val any
}

// get is the member named key, nil when there is none.
func (o object) get(key string) any {
	for _, m := range o {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// has: o has a member named key.
func (o object) has(key string) bool {
	return slices.ContainsFunc(o, func(m member) bool { return m.key == key })
}

// decodeJSON reads one JSON value.
func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := decodeValue(d)
	if err == nil && d.More() {
		err = fmt.Errorf("more after the JSON value at byte %d", d.InputOffset())
	}
	return v, err
}

func decodeValue(d *json.Decoder) (any, error) {
	t, err := d.Token()
	delim, ok := t.(json.Delim)
	if err != nil || !ok { // a scalar, or the error
		return t, err
	}
	var obj object
	var arr []any
	for d.More() {
		var key any
		if delim == '{' {
			if key, err = d.Token(); err != nil {
				return nil, err
			}
		}
		v, err := decodeValue(d)
		if err != nil {
			return nil, err
		}
		if delim == '{' {
			obj = append(obj, member{key.(string), v})
		} else {
			arr = append(arr, v)
		}
	}
	if _, err := d.Token(); err != nil {
		return nil, err
	}
	if delim == '{' {
		return obj, nil
	}
	return arr, nil
}

// writeSections prints the named sections of a report (all of its
// members when none is named), each as writeSection does.
func writeSections(w io.Writer, doc object, sections ...string) error {
	if len(sections) == 0 {
		for _, m := range doc {
			sections = append(sections, m.key)
		}
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, s := range sections {
		writeSection(tw, s, doc.get(s))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A blank line around each table, one between two.
	_, err := io.WriteString(w, strings.ReplaceAll(b.String(), "\n\n\n", "\n\n"))
	return err
}

// writeSection prints v under name: an object of objects (the arms), or a
// list of objects, as a table, a row a member (an item) and a column a
// flat field, and each field that is an object in the rows as a table of
// its own, name.field; any other object or list as a line of its flat
// members, `name:  key=value ...` (wrapped), its other members after it
// under their path; a scalar or a list of scalars as `name: value`.
func writeSection(w io.Writer, name string, v any) {
	members, ok := membersOf(v)
	if !ok || isFlat(v) {
		fmt.Fprintf(w, "%s: %s\n", name, format(v))
		return
	}
	if isTable(members) {
		var cols, nested []string
		for _, row := range members {
			for _, m := range row.val.(object) {
				if _, obj := m.val.(object); obj && !slices.Contains(nested, m.key) {
					nested = append(nested, m.key)
				} else if !obj && !slices.Contains(cols, m.key) {
					cols = append(cols, m.key)
				}
			}
		}
		if len(cols) > 0 {
			fmt.Fprintf(w, "\n%s\t%s\n", name, strings.Join(cols, "\t"))
			for _, row := range members {
				cells := []string{row.key}
				for _, c := range cols {
					cells = append(cells, format(row.val.(object).get(c)))
				}
				fmt.Fprintln(w, strings.Join(cells, "\t"))
			}
			fmt.Fprintln(w)
		}
		for _, k := range nested {
			sub := make(object, len(members))
			for i, row := range members {
				sub[i] = member{row.key, row.val.(object).get(k)}
			}
			writeSection(w, name+"."+k, sub)
		}
		return
	}
	line := name + ":"
	for _, m := range members {
		if !isFlat(m.val) {
			continue
		}
		kv := m.key + "=" + format(m.val)
		if len(line)+len(kv) > 110 && strings.Contains(line, "=") { // wrapped, the rest indented
			fmt.Fprintln(w, line)
			line = " "
		}
		line += "  " + kv
	}
	if strings.Contains(line, "=") {
		fmt.Fprintln(w, line)
	}
	for _, m := range members {
		if !isFlat(m.val) {
			writeSection(w, name+"."+m.key, m.val)
		}
	}
}

// membersOf is v's members: an object's, or a list's items keyed 1, 2...
func membersOf(v any) (object, bool) {
	switch x := v.(type) {
	case object:
		return x, true
	case []any:
		o := make(object, len(x))
		for i, e := range x {
			o[i] = member{strconv.Itoa(i + 1), e}
		}
		return o, true
	}
	return nil, false
}

// isTable: the members are table rows, records rather than sections:
// each an object whose fields are flat or objects of flat fields, with
// some field in every one.
func isTable(members object) bool {
	if len(members) == 0 {
		return false
	}
	for _, row := range members {
		o, ok := row.val.(object)
		if !ok {
			return false
		}
		for _, f := range o {
			inner, obj := f.val.(object)
			if obj && slices.ContainsFunc(inner, func(m member) bool { return !isFlat(m.val) }) || !obj && !isFlat(f.val) {
				return false
			}
		}
	}
	return slices.ContainsFunc(members[0].val.(object), func(f member) bool {
		return !slices.ContainsFunc(members, func(row member) bool { return !row.val.(object).has(f.key) })
	})
}

// isFlat: v is a scalar or a list of scalars.
func isFlat(v any) bool {
	switch x := v.(type) {
	case object:
		return false
	case []any:
		for _, e := range x {
			switch e.(type) {
			case object, []any:
				return false
			}
		}
	}
	return true
}

// format prints a flat value: integers as they are, other numbers to four
// significant digits (whole above a thousand), null as "-".
func format(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return x.String()
		}
		f, _ := x.Float64()
		return formatNumber(f)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = format(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v)
}

// number reads a JSON number; 0 when v is none.
func number(v any) float64 {
	n, _ := v.(json.Number)
	f, _ := n.Float64()
	return f
}

// JSONTable prints the table of v's JSON, every member as writeSection
// shows it.
func JSONTable(v any) func(io.Writer) error {
	return func(w io.Writer) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		doc, err := decodeJSON(b)
		if err != nil {
			return err
		}
		obj, _ := doc.(object)
		return writeSections(w, obj)
	}
}
