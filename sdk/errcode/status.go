package errcode

import (
	"strconv"
	"strings"
)

// FromStatus reads a registry error back from a gRPC status (its code's
// value and its message), as the host wrote it with Error's text: the
// code, message, details and directive index come back (ParseMessage). A
// message with no registry code is the transport's own failure and reads
// by its status (errors.json's grpc_fallback), Internal when none fits,
// with the whole message as its detail.
//
// The Python SDK's kvpilot.errors.from_rpc_error reads the same way; both
// are held to testdata/status_messages.json.
func FromStatus(grpcCode uint32, msg string) *Error {
	if e, ok := ParseMessage(msg); ok {
		return e
	}
	code, ok := byGRPCStatus[grpcCode]
	if !ok {
		code = Internal
	}
	return &Error{Code: code, Detail: msg, Index: -1}
}

// ParseMessage reads "[directive N: ]code: message[: details]", the text
// of Error; false when msg does not start with a registry code. The
// message of the code is left out of Detail when it is there, so the
// error reads back exactly as it was written.
func ParseMessage(msg string) (*Error, bool) {
	index, rest := -1, msg
	if after, ok := strings.CutPrefix(rest, "directive "); ok {
		if n, tail, ok := strings.Cut(after, ": "); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			if i, err := strconv.Atoi(n); err == nil {
				index, rest = i, tail
			}
		}
	}
	code, body, _ := strings.Cut(rest, ": ")
	ent, ok := Lookup(Code(code))
	if !ok {
		return nil, false
	}
	if body == ent.Message {
		body = ""
	} else {
		body = strings.TrimPrefix(body, ent.Message+": ")
	}
	return &Error{Code: ent.Code, Detail: body, Index: index}, true
}
