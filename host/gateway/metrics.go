package gateway

import (
	"net/http"
	"strconv"
	"time"
)

// The api label of the front door's metrics.
const (
	apiOpenAI    = "openai"
	apiAnthropic = "anthropic"
	apiModels    = "models"
)

// measured wraps a handler so its requests are counted by status code and
// timed to the end of the response (a stream's last event).
func (s *Server) measured(api string, h http.HandlerFunc) http.HandlerFunc {
	m := s.cfg.Metrics
	if m == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h(sw, r)
		m.Requests.WithLabelValues(api, strconv.Itoa(sw.code)).Inc()
		m.Duration.WithLabelValues(api).Observe(time.Since(start).Seconds())
	}
}

// countClears records a request's first-time clears once the upstream
// accepted it (a failed request clears nothing).
func (s *Server) countClears(fresh []Applied) {
	m := s.cfg.Metrics
	if m == nil {
		return
	}
	for _, a := range fresh {
		n := 0
		switch {
		case a.ClearedToolUses != nil:
			n = *a.ClearedToolUses
		case a.ClearedThinkingTurns != nil:
			n = *a.ClearedThinkingTurns
		}
		m.Clears.WithLabelValues(a.Type).Add(float64(n))
		m.ClearedTokens.WithLabelValues(a.Type).Add(float64(a.ClearedInputTokens))
	}
}

// statusWriter remembers the status code a handler wrote; Unwrap lets
// http.ResponseController reach the connection's Flush for streams.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush passes a stream's flush through (handlers that assert
// http.Flusher still find one).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
