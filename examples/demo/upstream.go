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
// demo's proof that the edits reach the model. It also counts the tokens
// the front door's own prefill requests computed (with vLLM, a splice's
// replacement is prefilled by a completions request of token IDs).
type recorder struct {
	h  http.Handler
	mu sync.Mutex
	// sent is the harness's request in flight (requests are sequential).
	sent []chat.Message
	// edited: the last chat request the engine got had edited messages.
	edited bool
	st     upstreamStats
	// fills are the prompt tokens the front door's completions requests
	// had computed (not cached).
	fills int64
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

// lastEdited says whether the last chat request had edited messages.
func (r *recorder) lastEdited() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.edited
}

// fillTokens are the tokens the front door's own prefill requests computed.
func (r *recorder) fillTokens() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fills
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
	switch req.URL.Path {
	case "/v1/chat/completions":
		if json.Unmarshal(b, &got) == nil {
			r.compare(got.Messages)
		}
	case "/v1/completions":
		cw := &capture{ResponseWriter: w}
		r.h.ServeHTTP(cw, req)
		var resp struct{ Usage chatwire.Usage }
		if json.Unmarshal(cw.body.Bytes(), &resp) == nil {
			r.mu.Lock()
			r.fills += int64(resp.Usage.PromptTokens - resp.Usage.Cached())
			r.mu.Unlock()
		}
		return
	}
	r.h.ServeHTTP(w, req)
}

// capture keeps a copy of a response's body.
type capture struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (c *capture) Write(b []byte) (int, error) {
	c.body.Write(b)
	return c.ResponseWriter.Write(b)
}

func (r *recorder) compare(got []chat.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.Requests++
	r.st.Messages += len(got)
	r.edited = false
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
	r.edited = edited
}
