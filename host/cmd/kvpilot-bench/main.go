// Command kvpilot-bench runs kvpilot's benchmark scenarios. Users reach it
// as `kvpilot bench`, which runs this binary from beside kvpilot or from
// PATH (`make build` builds both into bin/): the harnesses, with their
// reference engine, traces and in-process hosts, stay out of the
// production binary.
//
//	kvpilot-bench                                        list the scenarios
//	kvpilot-bench <scenario> [--json] [--check] [flags]  run one
//
// Only the scenario's report goes to stdout; progress and errors go to
// stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kvpilot/kvpilot/host/cmd/internal/cliflag"
)

func main() { cliflag.Main(run) }

// run runs the scenario args name and returns the exit status: 0, 1 when
// it failed (or missed a target under --check), 2 on a usage error. Its
// messages speak as `kvpilot bench`, the command users type.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := runBench(ctx, args, stdout, stderr)
	var usage cliflag.UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "kvpilot bench: %v\n", err)
		return 2
	case errors.Is(err, cliflag.ErrUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "kvpilot bench: %v\n", err)
		if hint := cliflag.HintOf(err); hint != "" {
			fmt.Fprintf(stderr, "  hint: %s\n", hint)
		}
		return 1
	}
}
