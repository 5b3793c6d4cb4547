package natsembed

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
)

// serverLogger routes the embedded server's log into the host's hclog.
// Notices (the start-up banner, JetStream settings, ...) go to debug: the
// host logs one info line of its own with the client URL. Fatalf is logged
// as an error: the server's own logger would exit the process, which is the
// host's decision, not a library's.
type serverLogger struct{ l hclog.Logger }

func (s serverLogger) Noticef(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s serverLogger) Warnf(format string, v ...any)   { s.l.Warn(fmt.Sprintf(format, v...)) }
func (s serverLogger) Fatalf(format string, v ...any)  { s.l.Error(fmt.Sprintf(format, v...)) }
func (s serverLogger) Errorf(format string, v ...any)  { s.l.Error(fmt.Sprintf(format, v...)) }
func (s serverLogger) Debugf(format string, v ...any)  { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s serverLogger) Tracef(format string, v ...any)  { s.l.Trace(fmt.Sprintf(format, v...)) }
