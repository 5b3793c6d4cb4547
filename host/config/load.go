package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/structs"
	"github.com/knadh/koanf/v2"

	"github.com/kvpilot/kvpilot/sdk/ttl"
)

// EnvPrefix starts every environment override.
const EnvPrefix = "KVPILOT_"

// EnvConfigFile names the config file when no --config flag is given.
const EnvConfigFile = "KVPILOT_CONFIG"

// toolEnv are the KVPILOT_ variables that are not configuration keys: the
// config file's name, and what kvpilot's own tools read (the CPU kernels'
// choice, bench's Python, traces and model cache, a policy plugin's log level and
// handshake, the Python tests' host binary, the opt-in load test's knobs).
// A shell that exports one still starts the host; any other KVPILOT_ name
// must be a key, so a typo still fails at start.
var toolEnv = map[string]bool{
	EnvConfigFile:              true,
	"KVPILOT_CPU_KERNELS":      true,
	"KVPILOT_PYTHON":           true,
	"KVPILOT_TRACES":           true,
	"KVPILOT_MODEL_CACHE":      true,
	"KVPILOT_POLICY_LOG_LEVEL": true,
	"KVPILOT_POLICY_PLUGIN":    true,
	"KVPILOT_BIN":              true,
	"KVPILOT_LOAD_DURATION":    true,
	"KVPILOT_LOAD_HEAPPROFILE": true,
	"KVPILOT_EXHAUSTIVE":       true,
}

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("invalid configuration")

// Load builds the configuration from defaults, the YAML file at path (none
// when path is empty) and the environment environ (as from os.Environ).
func Load(path string, environ []string) (Config, error) {
	k := koanf.New(".")
	if err := k.Load(structs.Provider(Default(), "koanf"), nil); err != nil {
		return Config{}, fmt.Errorf("load defaults: %w", err)
	}
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return Config{}, fmt.Errorf("%w: config file: %w", ErrInvalid, err)
		}
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return Config{}, fmt.Errorf("%w: config file %s: %w", ErrInvalid, path, err)
		}
	}
	if err := k.Load(envProvider(environ), nil); err != nil {
		return Config{}, fmt.Errorf("%w: environment: %w", ErrInvalid, err)
	}
	var c Config
	err := k.UnmarshalWithConf("", &c, koanf.UnmarshalConf{DecoderConfig: &mapstructure.DecoderConfig{
		DecodeHook:       mapstructure.ComposeDecodeHookFunc(durationHook, unsignedHook),
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		Result:           &c,
		TagName:          "koanf",
	}})
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalid, decodeError(err, envKeys(environ)))
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// envProvider reads KVPILOT_* variables from env rather than the process
// environment, so tests stay hermetic.
func envProvider(environ []string) koanf.Provider {
	return env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(k, v string) (string, any) {
			key, ok := envKey(k)
			if !ok {
				return "", nil
			}
			return key, v
		},
	})
}

// durationHook lets durations be written as the TTL syntax ("30s", "5m",
// bare seconds) or as a YAML number of seconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	switch v := data.(type) {
	case string:
		return ttl.Parse(v)
	case int:
		return ttl.FromSeconds(float64(v))
	case int64:
		return ttl.FromSeconds(float64(v))
	case uint64:
		return ttl.FromSeconds(float64(v))
	case float64:
		return ttl.FromSeconds(v)
	case time.Duration:
		return v, nil
	}
	return data, nil
}

// unsignedHook refuses negative numbers for unsigned fields, which weak
// typing would otherwise wrap around.
func unsignedHook(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	v := reflect.ValueOf(data)
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Int() < 0 {
			return nil, fmt.Errorf("%d is negative; want an unsigned integer", v.Int())
		}
	case reflect.Float32, reflect.Float64:
		if v.Float() < 0 {
			return nil, fmt.Errorf("%v is negative; want an unsigned integer", v.Float())
		}
	case reflect.String:
		if strings.HasPrefix(strings.TrimSpace(v.String()), "-") {
			return nil, fmt.Errorf("%q is negative; want an unsigned integer", v.String())
		}
	}
	return data, nil
}
