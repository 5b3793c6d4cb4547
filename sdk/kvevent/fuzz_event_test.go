package kvevent

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzEventJSON decodes what anyone publishing on the events subject can
// send to a watcher (controlclient's NATS Watch, a router). For any bytes:
// no panic, and an accepted event re-encodes to a canonical form that
// decodes to the same canonical form.
func FuzzEventJSON(f *testing.F) {
	f.Add([]byte(`{"worker_id":42,"storage_tier":"device","event":{"event_id":7,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}},"dp_rank":0}}`))
	f.Add([]byte(`{"worker_id":42,"storage_tier":"host_pinned","event":{"event_id":8,"data":{"stored":{"parent_hash":1,"blocks":[]}},"dp_rank":1}}`))
	f.Add([]byte(`{"worker_id":1,"storage_tier":"disk","event":{"event_id":9,"data":{"removed":{"block_hashes":[1,2,3]}},"dp_rank":0}}`))
	f.Add([]byte(`{"worker_id":1,"storage_tier":"external","event":{"event_id":10,"data":"cleared","dp_rank":0}}`))
	f.Add([]byte(`{"event":{"data":{"stored":{},"removed":{}}}}`))
	f.Add([]byte(`{"event":{"data":"dropped"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev Event
		if json.Unmarshal(b, &ev) != nil {
			return
		}
		first, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("accepted event does not encode: %v", err)
		}
		var again Event
		if err := json.Unmarshal(first, &again); err != nil {
			t.Fatalf("canonical event %s does not decode: %v", first, err)
		}
		second, err := json.Marshal(again)
		if err != nil || !bytes.Equal(first, second) {
			t.Fatalf("unstable encoding:\n%s\n%s (%v)", first, second, err)
		}
	})
}
