package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// apiError is a failure the client sees: an HTTP status and a registry
// error (code, message, hint), written in the shape of the API the client
// spoke (writeOpenAI, writeAnthropic).
type apiError struct {
	status int
	err    *errcode.Error
	// openAICode overrides the registry code in OpenAI's "code" field
	// where OpenAI has its own (model_not_found).
	openAICode string
}

func badRequest(err error) *apiError {
	e := errcode.From(err)
	if e.Code == errcode.Internal {
		e = errcode.Wrap(errcode.BadRequest, err, "request body")
	}
	status := http.StatusBadRequest
	if e.Code == errcode.PayloadTooLarge {
		status = http.StatusRequestEntityTooLarge
	}
	return &apiError{status: status, err: e}
}

// StatusOverloaded is Anthropic's status for an overloaded API.
const StatusOverloaded = 529

// writeOpenAI writes e as OpenAI does: {"error": {message, type, param, code}},
// with the registry's hint beside them.
func writeOpenAI(w http.ResponseWriter, e *apiError) {
	typ := "invalid_request_error"
	switch {
	case e.status >= 500:
		typ = "server_error"
	case e.status == http.StatusUnauthorized || e.status == http.StatusForbidden:
		typ = "permission_error"
	}
	code := string(e.err.Code)
	if e.openAICode != "" {
		code = e.openAICode
	}
	writeJSON(w, e.status, chatwire.ErrorBody{Error: chatwire.ErrorDetail{Message: e.err.Error(), Type: typ, Code: code, Hint: e.err.Entry().Hint}})
}

// anthropicErrorBody is Anthropic's error shape.
type anthropicErrorBody struct {
	Type  string         `json:"type"`
	Error anthropicError `json:"error"`
}

type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
	Hint    string `json:"hint,omitempty"`
}

// anthropicType maps a status to Anthropic's error type, and a 503 (the
// upstream overloaded or down) to Anthropic's own 529 overloaded_error,
// which its clients retry.
func anthropicType(status int) (string, int) {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error", status
	case http.StatusUnauthorized:
		return "authentication_error", status
	case http.StatusForbidden:
		return "permission_error", status
	case http.StatusNotFound:
		return "not_found_error", status
	case http.StatusRequestEntityTooLarge:
		return "request_too_large", status
	case http.StatusTooManyRequests:
		return "rate_limit_error", status
	case http.StatusServiceUnavailable, StatusOverloaded:
		return "overloaded_error", StatusOverloaded
	case http.StatusGatewayTimeout:
		return "timeout_error", status
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error", status
	}
	return "api_error", status
}

func anthropicErr(e *apiError) (anthropicErrorBody, int) {
	typ, status := anthropicType(e.status)
	return anthropicErrorBody{Type: "error", Error: anthropicError{Type: typ, Message: e.err.Error(), Code: string(e.err.Code), Hint: e.err.Entry().Hint}}, status
}

func writeAnthropic(w http.ResponseWriter, e *apiError) {
	body, status := anthropicErr(e)
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
