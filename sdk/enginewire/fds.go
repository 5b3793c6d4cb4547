package enginewire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The descriptor side channel. gRPC cannot carry file descriptors, so after
// Register the engine connects to the host's descriptor socket (a second
// private Unix socket beside the engine socket, with the same permissions and
// peer-uid check) and claims the registration's memfds:
//
//	engine -> host: FDMagic ‖ token (FDTokenLen bytes)
//	host -> engine: FDMagic ‖ u32 LE count ‖ error text (when count is 0)
//	                with count descriptors attached (SCM_RIGHTS), in the
//	                order of the memfd entries of RegisterResponse.pools
//
// A token is good for one claim, by a process of the uid that registered,
// within a short time; a refusal carries count 0 and the reason.
const (
	FDMagic    = "KVPFD001"
	FDTokenLen = 16
	// FDReplyMax bounds a reply's payload.
	FDReplyMax = 512
)

// ErrFDProtocol is wrapped by malformed side-channel messages.
var ErrFDProtocol = errors.New("engine descriptor channel: protocol error")

// EncodeFDRequest is the engine's claim.
func EncodeFDRequest(token []byte) []byte {
	return append([]byte(FDMagic), token...)
}

// DecodeFDRequest returns the claimed token.
func DecodeFDRequest(b []byte) ([]byte, error) {
	if len(b) != len(FDMagic)+FDTokenLen || string(b[:len(FDMagic)]) != FDMagic {
		return nil, fmt.Errorf("%w: claim of %d bytes", ErrFDProtocol, len(b))
	}
	return b[len(FDMagic):], nil
}

// EncodeFDReply is the host's answer: count descriptors travel with it, or
// count is 0 and reason says why.
func EncodeFDReply(count int, reason string) []byte {
	b := append([]byte(FDMagic), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[len(FDMagic):], uint32(count))
	if room := FDReplyMax - len(b); len(reason) > room {
		reason = reason[:room]
	}
	return append(b, reason...)
}

// DecodeFDReply returns the count of descriptors and the refusal reason.
func DecodeFDReply(b []byte) (count int, reason string, err error) {
	if len(b) < len(FDMagic)+4 || string(b[:len(FDMagic)]) != FDMagic {
		return 0, "", fmt.Errorf("%w: reply of %d bytes", ErrFDProtocol, len(b))
	}
	return int(binary.LittleEndian.Uint32(b[len(FDMagic):])), string(b[len(FDMagic)+4:]), nil
}
