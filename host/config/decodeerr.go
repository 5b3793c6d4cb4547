package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

// envKey is the key path a KVPILOT_ variable sets ("KVPILOT_TIERS__HOST__
// CAPACITY_PAGES" sets tiers.host.capacity_pages); false for the variables
// kvpilot's tools read, which set no key.
func envKey(name string) (string, bool) {
	if toolEnv[name] || !strings.HasPrefix(name, EnvPrefix) {
		return "", false
	}
	k := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
	return strings.ReplaceAll(k, "__", "."), true
}

// envKeys maps each key path the environment sets to its variable's name.
func envKeys(environ []string) map[string]string {
	m := map[string]string{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if k, ok := envKey(name); ok {
			m[k] = name
		}
	}
	return m
}

// decodeError says what the decoder refused in the operator's words: a key
// by its path, or by the environment variable that set it, what was wrong
// with its value, and never a Go type ("'config.Config' has invalid keys").
func decodeError(err error, fromEnv map[string]string) error {
	var des []*mapstructure.DecodeError
	collect(err, &des)
	if len(des) == 0 {
		return err
	}
	var msgs []string
	for _, de := range des {
		msgs = append(msgs, describe(de, fromEnv)...)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// collect gathers the innermost decode errors of a joined error tree.
func collect(err error, out *[]*mapstructure.DecodeError) {
	switch e := err.(type) {
	case *mapstructure.DecodeError:
		before := len(*out)
		collect(e.Unwrap(), out)
		if len(*out) == before {
			*out = append(*out, e)
		}
	case interface{ Unwrap() []error }:
		for _, c := range e.Unwrap() {
			collect(c, out)
		}
	case interface{ Unwrap() error }:
		collect(e.Unwrap(), out)
	}
}

func describe(de *mapstructure.DecodeError, fromEnv map[string]string) []string {
	path := de.Name()
	if strings.Contains(path, "Config") { // the root: mapstructure names its Go type
		path = ""
	}
	label := func(p string) string {
		if v, ok := fromEnv[p]; ok {
			return fmt.Sprintf("%s (set by %s)", p, v)
		}
		return p
	}
	inner := de.Unwrap()
	if keys, ok := strings.CutPrefix(inner.Error(), "has invalid keys: "); ok {
		var out []string
		for _, k := range strings.Split(keys, ", ") {
			p := join(path, k)
			if v, ok := fromEnv[p]; ok {
				out = append(out, fmt.Sprintf("unknown environment variable %s: no configuration key %s", v, p))
			} else {
				out = append(out, "unknown key "+p)
			}
		}
		return out
	}
	var pe *mapstructure.ParseError
	var ue *mapstructure.UnconvertibleTypeError
	switch {
	case errors.As(inner, &pe):
		return []string{fmt.Sprintf("%s: %q is not %s", label(path), fmt.Sprint(pe.Value), kindOf(pe.Expected.Type()))}
	case errors.As(inner, &ue):
		return []string{fmt.Sprintf("%s: want %s, got %s", label(path), kindOf(ue.Expected.Type()), kindOf(reflect.TypeOf(ue.Value)))}
	case strings.HasPrefix(inner.Error(), "expected a map or struct"):
		return []string{fmt.Sprintf("%s: want a mapping of keys to values", label(path))}
	case strings.HasPrefix(inner.Error(), "source data must be an array or slice"):
		return []string{fmt.Sprintf("%s: want a list", label(path))}
	}
	return []string{fmt.Sprintf("%s: %v", label(path), inner)}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// kindOf names what a value of Go type t is written as in YAML.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "nothing"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if t == reflect.TypeOf(time.Duration(0)) {
			return "a duration"
		}
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping of keys to values"
	}
	return "another kind of value"
}
