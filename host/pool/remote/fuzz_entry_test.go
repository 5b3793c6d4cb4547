package remote

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
)

// Objects in the shared bucket are written by every host on the cluster,
// so their names and metadata are a peer's input: entryOf must refuse what
// it cannot read, never panic, and a key it reads must name the object.
func FuzzEntryOf(f *testing.F) {
	fp := layout.Fingerprint(0xfeed)
	prefix := fp.String() + "/"
	f.Add(ObjectName(fp, pool.Key{Namespace: "team x", Seq: 0xabc}), "1f", "2e")
	f.Add(ObjectName(fp, pool.Key{Namespace: "", Seq: 1}), "0", "")
	f.Add(prefix+"=%zz/1", "1", "")
	f.Add(prefix+"=a/ffffffffffffffffff", "x", "-1")
	f.Fuzz(func(t *testing.T, name, local, parent string) {
		meta := Meta{metaLocal: local}
		if parent != "" {
			meta[metaParent] = parent
		}
		e, ok := entryOf(name, meta, prefix)
		if !ok {
			return
		}
		if k, ok := parseName(prefix, ObjectName(fp, e.Key)); !ok || k != e.Key {
			t.Fatalf("key %+v read from %q does not survive its own name: %+v %v", e.Key, name, k, ok)
		}
	})
}
