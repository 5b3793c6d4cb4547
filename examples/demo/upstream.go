package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

// recorder stands between the front door and the engine's HTTP server and
// compares what the engine received with what the harness sent: the
// demo's proof that the edits reach the model.
type recorder struct {
	h  http.Handler
	mu sync.Mutex
	// sent is the harness's request in flight (requests are sequential).
	sent []chat.Message
	st   upstreamStats
}

// upstreamStats count the engine's requests and the messages in them that
// differ from what the harness sent.
type upstreamStats struct {
	Requests, Messages      int
	EditedRequests          int
	StubbedResults, Cleared int // tool results cut to stubs, reasoning cleared
	Mismatched              int // requests whose message count differs
}

func newRecorder(h http.Handler) *recorder { return &recorder{h: h} }

func (r *recorder) expect(msgs []chat.Message) {
	r.mu.Lock()
	r.sent = msgs
	r.mu.Unlock()
}

func (r *recorder) stats() upstreamStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(b))
	var got chatwire.Request
	if json.Unmarshal(b, &got) == nil && req.URL.Path == "/v1/chat/completions" {
		r.compare(got.Messages)
	}
	r.h.ServeHTTP(w, req)
}

func (r *recorder) compare(got []chat.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.Requests++
	r.st.Messages += len(got)
	if len(got) != len(r.sent) {
		r.st.Mismatched++
		return
	}
	edited := false
	for i, m := range got {
		s := r.sent[i]
		if m.Content != s.Content && m.Role == "tool" {
			r.st.StubbedResults++
			edited = true
		}
		if m.ThinkingText != s.ThinkingText {
			r.st.Cleared++
			edited = true
		}
	}
	if edited {
		r.st.EditedRequests++
	}
}
