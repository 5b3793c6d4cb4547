package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// upstream is the engine's OpenAI-compatible server.
type upstream struct {
	base   string
	key    string
	client *http.Client
}

func newUpstream(base, key string, timeout time.Duration) *upstream {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// A slow upstream is one that sends no response headers in time; a
	// stream may then flow as long as it needs.
	tr.ResponseHeaderTimeout = timeout
	return &upstream{base: strings.TrimRight(base, "/"), key: key, client: &http.Client{Transport: tr}}
}

// do sends a request upstream. A response other than 2xx, and a transport
// failure, come back as the apiError the client should see (with the
// response closed).
func (u *upstream) do(ctx context.Context, method, path string, body []byte) (*http.Response, *apiError) {
	return u.send(ctx, method, u.base+path, body)
}

// root is the server's own address: the base without its API version
// (vLLM serves /tokenize beside /v1, not under it).
func (u *upstream) root() string { return strings.TrimSuffix(u.base, "/v1") }

// send is do with a whole URL.
func (u *upstream) send(ctx context.Context, method, url string, body []byte) (*http.Response, *apiError) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, &apiError{status: http.StatusInternalServerError, err: errcode.Wrap(errcode.Internal, err, "upstream request")}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if u.key != "" {
		req.Header.Set("Authorization", "Bearer "+u.key)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, transportError(err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, statusError(resp)
	}
	return resp, nil
}

// transportError: a timeout is 504, anything else (refused, reset, DNS)
// means the upstream is down: 502.
func transportError(err error) *apiError {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &apiError{status: http.StatusGatewayTimeout, err: errcode.Wrap(errcode.DeadlineExceeded, err,
			"the upstream engine sent no response within gateway.timeout")}
	}
	return &apiError{status: http.StatusBadGateway, err: errcode.Wrap(errcode.Unavailable, err, "the upstream engine is unreachable")}
}

// statusError carries an upstream's refusal to the client: 4xx as they
// are (404 is an unknown model), 503 as overloaded, other 5xx as 502.
func statusError(resp *http.Response) *apiError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg, code, param := upstreamMessage(b)
	switch s := resp.StatusCode; {
	case s == http.StatusBadRequest && tooLong(msg, code, param):
		return &apiError{status: s, err: errcode.New(errcode.PromptTooLong, "upstream: %s", msg), openAICode: contextLengthExceeded}
	case s == http.StatusNotFound:
		return &apiError{status: s, err: errcode.New(errcode.BadRequest, "upstream: %s", msg), openAICode: "model_not_found"}
	case s == http.StatusRequestEntityTooLarge:
		return &apiError{status: s, err: errcode.New(errcode.PayloadTooLarge, "upstream: %s", msg)}
	case s >= 400 && s < 500:
		return &apiError{status: s, err: errcode.New(errcode.BadRequest, "upstream: %s", msg)}
	case s == http.StatusServiceUnavailable || s == StatusOverloaded:
		return &apiError{status: http.StatusServiceUnavailable, err: errcode.New(errcode.Unavailable, "upstream overloaded: %s", msg)}
	}
	return &apiError{status: http.StatusBadGateway, err: errcode.New(errcode.Unavailable, "upstream answered %d: %s", resp.StatusCode, msg)}
}

// contextLengthExceeded is OpenAI's code for a prompt longer than the
// model's context, which the front door answers with it too.
const contextLengthExceeded = "context_length_exceeded"

// tooLong tells a prompt longer than the engine's context from the other
// 400s: by OpenAI's code or kvpilot's, or as vLLM says it (a numeric code,
// the input_tokens or input_text parameter, "maximum context length" in
// vllm/renderers/params.py's messages).
func tooLong(msg, code, param string) bool {
	return code == contextLengthExceeded || code == string(errcode.PromptTooLong) ||
		param == "input_tokens" || param == "input_text" || strings.Contains(msg, "maximum context length")
}

// upstreamMessage reads an OpenAI error's message, its code when a string
// and its param, or the body's start.
func upstreamMessage(b []byte) (msg, code, param string) {
	var e struct {
		Error struct {
			Message string          `json:"message"`
			Code    json.RawMessage `json:"code"`
			Param   json.RawMessage `json:"param"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil {
		_ = json.Unmarshal(e.Error.Code, &code) // vLLM sends a number
		_ = json.Unmarshal(e.Error.Param, &param)
		if e.Error.Message != "" {
			return e.Error.Message, code, param
		}
		if e.Message != "" {
			return e.Message, code, param
		}
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s, "", ""
}
