package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"

	"github.com/hashicorp/go-plugin"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policy/pluginwire"
)

// proc is one running plugin process.
type proc struct {
	client *plugin.Client
	rpc    *pluginwire.Client
	info   pluginwire.Negotiated
}

// launch starts the plugin process for spec, negotiates Info and calls
// Configure, all within ctx. An external plugin's binary must hash to its
// configured sha256, which go-plugin checks before it runs the file.
func (r *Runtime) launch(ctx context.Context, spec config.Policy) (*proc, error) {
	var cmd *exec.Cmd
	var secure *plugin.SecureConfig
	if spec.Builtin != "" {
		cmd = exec.Command(r.opts.Executable, r.opts.BuiltinArgs(spec.Builtin)...)
	} else {
		sum, err := hex.DecodeString(strings.ToLower(spec.SHA256))
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("policy %q: sha256 %q is not a hex SHA-256 digest", spec.Name, spec.SHA256)
		}
		cmd = exec.Command(spec.Path)
		secure = &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	cmd.Env = append(os.Environ(), r.opts.Env...)
	params, err := paramsJSON(spec.Params)
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", spec.Name, err)
	}
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginwire.Handshake,
		Plugins:          pluginwire.Plugins(),
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     r.opts.StartTimeout,
		Logger:           r.log.Named(spec.Name),
	})
	fail := func(err error) (*proc, error) {
		c.Kill()
		return nil, fmt.Errorf("policy %q: %w", spec.Name, err)
	}
	cp, err := c.Client()
	if err != nil {
		return fail(err)
	}
	raw, err := cp.Dispense(pluginwire.PluginName)
	if err != nil {
		return fail(err)
	}
	rpc, ok := raw.(*pluginwire.Client)
	if !ok {
		return fail(fmt.Errorf("dispensed %T, want *pluginwire.Client", raw))
	}
	info, err := rpc.Info(ctx, []uint32{policy.APIVersion})
	if err != nil {
		return fail(err)
	}
	if err := rpc.Configure(ctx, params, info.APIVersion); err != nil {
		return fail(err)
	}
	return &proc{client: c, rpc: rpc, info: info}, nil
}

func (p *proc) pid() int {
	if rc := p.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// paramsJSON encodes a policy's params as the JSON object Configure takes.
func paramsJSON(params map[string]any) ([]byte, error) {
	if params == nil {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	return b, nil
}

// sameSpec reports whether a running instance of a can stand for b.
func sameSpec(a, b config.Policy) bool {
	if a.Name != b.Name || a.Builtin != b.Builtin || a.Path != b.Path || !strings.EqualFold(a.SHA256, b.SHA256) ||
		!slices.Equal(a.Tenants, b.Tenants) {
		return false
	}
	pa, errA := paramsJSON(a.Params)
	pb, errB := paramsJSON(b.Params)
	return errA == nil && errB == nil && reflect.DeepEqual(pa, pb)
}
