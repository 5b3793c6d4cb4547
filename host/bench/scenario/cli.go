package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// Output writes a report the way every `kvpilot bench` scenario does: its
// table, or one JSON object with --json; and the SVG plot when plotPath is
// set.
func Output(stdout io.Writer, rep Report, asJSON bool, plotPath, title string) error {
	if plotPath != "" {
		f, err := os.Create(plotPath)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		werr := WriteSVG(f, title, rep.Charts())
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return fmt.Errorf("plot %s: %w", plotPath, werr)
		}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	if t, ok := rep.(interface{ WriteTable(io.Writer) error }); ok {
		return t.WriteTable(stdout)
	}
	return JSONTable(rep)(stdout)
}

// TerminalProgress reports progress on stderr when it is a terminal,
// rewriting one line at most ten times a second; otherwise it is silent.
func TerminalProgress(stderr *os.File) Progress {
	if stderr == nil || !term.IsTerminal(int(stderr.Fd())) {
		return nil
	}
	var last time.Time
	return func(format string, args ...any) {
		if time.Since(last) < 100*time.Millisecond {
			return
		}
		last = time.Now()
		fmt.Fprintf(stderr, "\r\033[K"+format, args...)
	}
}

// EndProgress clears the progress line.
func EndProgress(stderr *os.File, p Progress) {
	if p != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
}
