package disk

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/pool"
)

// A page file's headers are read back at every start and may be torn,
// truncated or overwritten by anything with access to the data dir:
// decode must refuse what it cannot read, never panic, and whatever it
// accepts must encode back to the same header.
func FuzzHeaderDecode(f *testing.F) {
	good := make([]byte, headerSize)
	(&header{fp: 7, entry: pool.Entry{Key: pool.Key{Namespace: "acme", Seq: 42}, Local: 9, Parent: 3, HasParent: true},
		length: 4096, payloadSum: 11, gen: 2}).encode(good)
	f.Add(good)
	f.Add(make([]byte, headerSize))
	f.Add([]byte("KVPG"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < headerSize {
			b = append(b, make([]byte, headerSize-len(b))...)
		}
		b = b[:headerSize]
		var h header
		if err := h.decode(b); err != nil {
			return
		}
		if len(h.entry.Namespace) > pool.MaxNamespace {
			t.Fatalf("accepted a %d-byte namespace", len(h.entry.Namespace))
		}
		again := make([]byte, headerSize)
		h.encode(again)
		var back header
		if err := back.decode(again); err != nil || back != h {
			t.Fatalf("accepted header %+v does not round-trip: %+v, %v", h, back, err)
		}
	})
}
