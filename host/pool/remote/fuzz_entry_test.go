package remote

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
)

// Objects in the shared bucket are written by every host on the cluster,
// so their names and headers are a peer's input: entryOf must refuse what
// it cannot read, never panic, and a key it reads must name the object.
func FuzzEntryOf(f *testing.F) {
	fp := layout.Fingerprint(0xfeed)
	prefix := fp.String() + "/"
	f.Add(ObjectName(fp, pool.Key{Namespace: "team x", Seq: 0xabc}), "1f", "2e")
	f.Add(ObjectName(fp, pool.Key{Namespace: "", Seq: 1}), "0", "")
	f.Add(prefix+"=%zz/1", "1", "")
	f.Add(prefix+"=a/ffffffffffffffffff", "x", "-1")
	f.Fuzz(func(t *testing.T, name, local, parent string) {
		h := nats.Header{}
		h.Set(hdrLocal, local)
		if parent != "" {
			h.Set(hdrParent, parent)
		}
		info := &jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: name, Headers: h}}
		e, ok := entryOf(info, prefix)
		if !ok {
			return
		}
		if k, ok := parseName(prefix, ObjectName(fp, e.Key)); !ok || k != e.Key {
			t.Fatalf("key %+v read from %q does not survive its own name: %+v %v", e.Key, name, k, ok)
		}
	})
}
