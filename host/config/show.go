package config

import (
	"fmt"
	"sort"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/structs"
)

// YAML is the configuration as a config file would write it: every key
// under its YAML name, durations in the TTL syntax ("5m0s"). `serve
// --check` prints it, so an operator sees what the defaults, the file and
// the environment added up to. Secrets are not printed: the upstream's API
// key reads "(set)", and the API keys gateway.tenants binds are numbered.
func (c Config) YAML() ([]byte, error) {
	if c.Gateway.UpstreamAPIKey != "" {
		c.Gateway.UpstreamAPIKey = "(set)"
	}
	if len(c.Gateway.Tenants) > 0 {
		keys := make([]string, 0, len(c.Gateway.Tenants))
		for k := range c.Gateway.Tenants {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		hidden := make(map[string][]string, len(keys))
		for i, k := range keys {
			hidden[fmt.Sprintf("(API key %d)", i+1)] = c.Gateway.Tenants[k]
		}
		c.Gateway.Tenants = hidden
	}
	m, err := structs.Provider(c, "koanf").Read()
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	return yaml.Parser().Marshal(readable(m).(map[string]any))
}

// readable writes durations as text; YAML would print nanoseconds.
func readable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = readable(e)
		}
	case []any:
		for i, e := range x {
			x[i] = readable(e)
		}
	case time.Duration:
		return x.String()
	}
	return v
}
