package refengine

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

// streamPiece is how many bytes of the answer each content chunk carries.
const streamPiece = 16

// stream writes the answer as OpenAI server-sent events: a role chunk,
// content (or tool-call) chunks, a finish chunk, a usage chunk when the
// request asked for stream_options.include_usage, then [DONE].
func (s *Server) stream(w http.ResponseWriter, req *chatwire.Request, id string, answer chat.Message, finish string,
	usage chatwire.Usage, ext json.RawMessage) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	created := time.Now().Unix()
	send := func(c chatwire.Choice, u *chatwire.Usage, x json.RawMessage) {
		chunk := chatwire.Response{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.o.ModelName, Usage: u, KVPilot: x,
			Choices: []chatwire.Choice{c}}
		if u != nil {
			chunk.Choices = []chatwire.Choice{}
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	send(chatwire.Choice{Delta: &chatwire.Delta{Role: "assistant"}}, nil, nil)
	text := answer.Content
	for i := 0; i < len(text); i += streamPiece {
		piece := text[i:min(i+streamPiece, len(text))]
		send(chatwire.Choice{Delta: &chatwire.Delta{Content: &piece}}, nil, nil)
	}
	for i, c := range answer.ToolCalls {
		idx := i
		c.Index = &idx
		send(chatwire.Choice{Delta: &chatwire.Delta{ToolCalls: []chat.ToolCall{c}}}, nil, nil)
	}
	send(chatwire.Choice{Delta: &chatwire.Delta{}, FinishReason: &finish}, nil, nil)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send(chatwire.Choice{}, &usage, ext)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}
