package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// sseEvent is one server-sent event: its type (event:) and data lines.
type sseEvent struct {
	name, data string
}

// maxEventBytes bounds one upstream event; longer is a broken stream.
const maxEventBytes = 8 << 20

// sseReader reads server-sent events.
type sseReader struct{ br *bufio.Reader }

func newSSEReader(r io.Reader) *sseReader { return &sseReader{br: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next event, io.EOF at a clean end between events, and
// io.ErrUnexpectedEOF when the stream stops inside one.
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data strings.Builder
	started := false
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && !started && line == "" {
				return ev, io.EOF
			}
			if errors.Is(err, io.EOF) {
				return ev, io.ErrUnexpectedEOF
			}
			return ev, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if started {
				ev.data = data.String()
				return ev, nil
			}
			continue
		}
		started = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.name = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			if data.Len() > maxEventBytes {
				return ev, fmt.Errorf("upstream event over %d bytes", maxEventBytes)
			}
		}
	}
}

// sseWriter writes server-sent events and flushes each.
type sseWriter struct {
	w  http.ResponseWriter
	fl http.Flusher
}

func startSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return &sseWriter{w: w, fl: fl}
}

// send writes one event (name "" writes data only, as OpenAI does).
func (s *sseWriter) send(name string, data []byte) {
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	if s.fl != nil {
		s.fl.Flush()
	}
}
