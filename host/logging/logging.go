// Package logging builds the host's hclog logger: JSON when stderr is not a
// terminal (so log shippers get structured records), human text when it is.
package logging

import (
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/term"
)

// New returns a logger named kvpilot writing to w at level ("info", ...).
// format is auto, json or text; auto picks JSON unless w is a terminal.
func New(w io.Writer, level, format string) hclog.Logger {
	json := format == "json"
	if format == "auto" {
		json = !isTerminal(w)
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:            "kvpilot",
		Level:           hclog.LevelFromString(level),
		Output:          w,
		JSONFormat:      json,
		IncludeLocation: false,
	})
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
