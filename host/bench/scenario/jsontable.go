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
	if err != nil {
		return nil, err
	}
	delim, ok := t.(json.Delim)
	if !ok {
		return t, nil
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
// flat field, and each field that is an object in every row as a table of
// its own, name.field; any other object as a line of its flat members,
// `name:  key=value ...` (wrapped), its other members after it under
// their path; a scalar as `name: value`.
func writeSection(w io.Writer, name string, v any) {
	if labels, rows := rowsOf(v); rows != nil {
		var cols, nested []string
		for _, r := range rows {
			for _, m := range r {
				if _, obj := m.val.(object); obj && !slices.Contains(nested, m.key) {
					nested = append(nested, m.key)
				} else if !obj && !slices.Contains(cols, m.key) {
					cols = append(cols, m.key)
				}
			}
		}
		if len(cols) > 0 {
			fmt.Fprintf(w, "\n%s\t%s\n", name, strings.Join(cols, "\t"))
			for i, r := range rows {
				cells := make([]string, len(cols))
				for j, c := range cols {
					cells[j] = format(r.get(c))
				}
				fmt.Fprintf(w, "%s\t%s\n", labels[i], strings.Join(cells, "\t"))
			}
			fmt.Fprintln(w)
		}
		for _, k := range nested {
			sub := make(object, len(rows))
			for i, r := range rows {
				sub[i] = member{labels[i], r.get(k)}
			}
			writeSection(w, name+"."+k, sub)
		}
		return
	}
	var members object
	switch x := v.(type) {
	case object:
		members = x
	case []any:
		if isFlat(x) {
			fmt.Fprintf(w, "%s: %s\n", name, format(v))
			return
		}
		for i, e := range x {
			members = append(members, member{strconv.Itoa(i + 1), e})
		}
	default:
		fmt.Fprintf(w, "%s: %s\n", name, format(v))
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

// rowsOf reads v as table rows: the members of an object, or the items of
// a list, when every one is an object whose members are flat or objects of
// flat members, and some field is in every one (records, not sections);
// rows is nil when v is not such a table.
func rowsOf(v any) (labels []string, rows []object) {
	flatObject := func(v any) bool {
		o, ok := v.(object)
		return ok && !slices.ContainsFunc(o, func(m member) bool { return !isFlat(m.val) })
	}
	add := func(label string, item any) bool {
		o, ok := item.(object)
		if !ok || slices.ContainsFunc(o, func(m member) bool { return !isFlat(m.val) && !flatObject(m.val) }) {
			return false
		}
		labels, rows = append(labels, label), append(rows, o)
		return true
	}
	switch x := v.(type) {
	case object:
		for _, m := range x {
			if !add(m.key, m.val) {
				return nil, nil
			}
		}
	case []any:
		for i, item := range x {
			if !add(strconv.Itoa(i+1), item) {
				return nil, nil
			}
		}
	}
	if len(rows) == 0 {
		return nil, nil
	}
	for _, m := range rows[0] {
		if !slices.ContainsFunc(rows, func(r object) bool { return !r.has(m.key) }) {
			return labels, rows // m.key is in every row
		}
	}
	return nil, nil
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

// JSONTable prints the table of v's JSON (a harness's result that is not a
// Report), its sections as a Report from JSON shows them.
func JSONTable(v any, sections ...string) func(io.Writer) error {
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
		return writeSections(w, obj, sections...)
	}
}
