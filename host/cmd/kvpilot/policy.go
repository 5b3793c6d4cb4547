package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/kvpilot/kvpilot/policies"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// `kvpilot policy NAME` is how the host runs a built-in policy: as a
// separate process of its own binary, speaking the plugin protocol. In that
// process stdout is the go-plugin handshake, so nothing here prints to it.
func init() {
	registerCommand(command{
		Name:    "policy",
		Summary: "serve a built-in policy plugin (started by the host)",
		Run:     runPolicy,
	})
}

func runPolicy(_ context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlagSet("policy", "NAME",
		"Serves the built-in policy NAME as a plugin process. The host starts it for\n"+
			"each entry of the config's `policies` section with `builtin: NAME`;\n"+
			"running it by hand only prints this reminder. Built-ins: "+strings.Join(policies.Names(), ", ")+".", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	p, err := policies.New(fs.Arg(0))
	if err != nil {
		return err
	}
	if err := policy.Run(p); err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	return nil
}
