package scenario

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/term"
)

// Progress reports a scenario's progress to a person (nil: silent). The
// CLI passes one that rewrites a line on stderr when it is a terminal.
type Progress func(format string, args ...any)

func (p Progress) say(format string, args ...any) {
	if p != nil {
		p(format, args...)
	}
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
