package enginewire

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzFDMessages decodes what a peer can write on the descriptor side
// channel: claims (read by the host from any allowed engine) and replies
// (read by the engine). For any bytes: no panic, a refusal wraps
// ErrFDProtocol, and what is accepted re-encodes to the same bytes.
func FuzzFDMessages(f *testing.F) {
	f.Add(EncodeFDRequest([]byte("0123456789abcdef")))
	f.Add(EncodeFDReply(2, ""))
	f.Add(EncodeFDReply(0, "unknown or already claimed token: register again"))
	f.Add([]byte(FDMagic))
	f.Add([]byte("KVPFD00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if tok, err := DecodeFDRequest(b); err != nil {
			if !errors.Is(err, ErrFDProtocol) {
				t.Fatalf("claim refusal %v does not wrap ErrFDProtocol", err)
			}
		} else if len(tok) != FDTokenLen || !bytes.Equal(EncodeFDRequest(tok), b) {
			t.Fatalf("claim %q decoded to token %q", b, tok)
		}
		count, reason, err := DecodeFDReply(b)
		if err != nil {
			if !errors.Is(err, ErrFDProtocol) {
				t.Fatalf("reply refusal %v does not wrap ErrFDProtocol", err)
			}
			return
		}
		if count < 0 {
			t.Fatalf("negative descriptor count %d", count)
		}
		if len(b) <= FDReplyMax && !bytes.Equal(EncodeFDReply(count, reason), b) {
			t.Fatalf("reply %q re-encodes to %q", b, EncodeFDReply(count, reason))
		}
	})
}
