package publish

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// What Dynamo's own KvEventPublisher (ai-dynamo 1.6.1) listed in its file
// discovery store for publisher 5109971433890626 (hex 12277df0212342),
// worker 16287127938059717990, dp_rank 0, on ns3/backend/generate.
const (
	dynamoKey     = "namespace%2Fns3%2Fcomponent%2Fbackend%2Fendpoint%2Fgenerate%2Ftopic%2Fkv%2Devents%2F12277df0212342"
	dynamoChannel = `{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"ns3","component":"backend","name":"generate"}},"topic":"kv-events","instance_id":5109971433890626,"transport":{"kind":"Nats","config":{"subject_prefix":"namespace.ns3.component.backend.endpoint.generate"}}}`
	dynamoSource  = `{"type":"EventSource","scope":{"kind":"endpoint","endpoint":{"namespace":"ns3","component":"backend","name":"generate"}},"topic":"kv-events","publisher_id":5109971433890626,"metadata":{"kv_state_endpoint":{"namespace":"ns3","component":"backend","name":"generate"},"worker":{"worker_id":16287127938059717990,"dp_rank":0},"publisher_id":5109971433890626}}`
)

func sameJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	dec := func(b []byte, v *any) {
		d := json.NewDecoder(bytesReader(b))
		d.UseNumber()
		if err := d.Decode(v); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	dec(got, &g)
	dec([]byte(want), &w)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\ngot  %s\nwant %s", what, got, want)
	}
}

// The host lists its publisher exactly as Dynamo's publisher lists itself
// (same file names, same records), and unlisting removes both files.
func TestRegisterFileDiscoveryMatchesDynamo(t *testing.T) {
	dir := t.TempDir()
	unlist, err := RegisterFileDiscovery(dir, DynamoSource{Namespace: "ns3", Component: "backend", Endpoint: "generate",
		PublisherID: 5109971433890626, WorkerID: 16287127938059717990})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := os.ReadFile(filepath.Join(dir, "v1", "event_channels", dynamoKey))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(dir, "v1", "event_sources", dynamoKey))
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "event channel", ch, dynamoChannel)
	sameJSON(t, "event source", src, dynamoSource)
	// No temporary file is left where Dynamo looks.
	for _, b := range []string{"event_channels", "event_sources"} {
		ents, _ := os.ReadDir(filepath.Join(dir, "v1", b))
		if len(ents) != 1 {
			t.Fatalf("%s holds %d entries, want 1", b, len(ents))
		}
	}
	if err := unlist(); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"event_channels", "event_sources"} {
		if _, err := os.Stat(filepath.Join(dir, "v1", b, dynamoKey)); !os.IsNotExist(err) {
			t.Fatalf("%s entry still there after unlisting (%v)", b, err)
		}
	}
	if err := unlist(); err != nil {
		t.Fatalf("unlisting twice: %v", err)
	}
}

func TestRegisterFileDiscoveryUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := RegisterFileDiscovery(file, DynamoSource{Namespace: "a", Component: "b", Endpoint: "c", PublisherID: 1}); err == nil {
		t.Fatal("listing under a plain file succeeded")
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// A second source for the same worker and rank is found; sources for
// other workers, ranks or endpoints, and the host's own, are not.
func TestOtherSources(t *testing.T) {
	dir := t.TempDir()
	me := DynamoSource{Namespace: "ns", Component: "c", Endpoint: "e", PublisherID: 1, WorkerID: 7, DPRank: 0}
	for _, s := range []DynamoSource{
		me,
		{Namespace: "ns", Component: "c", Endpoint: "e", PublisherID: 2, WorkerID: 7, DPRank: 0},
		{Namespace: "ns", Component: "c", Endpoint: "e", PublisherID: 3, WorkerID: 7, DPRank: 1},
		{Namespace: "ns", Component: "c", Endpoint: "e", PublisherID: 4, WorkerID: 8, DPRank: 0},
		{Namespace: "ns", Component: "c", Endpoint: "other", PublisherID: 5, WorkerID: 7, DPRank: 0},
	} {
		if _, err := RegisterFileDiscovery(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "v1", "event_sources", "junk"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := OtherSources(dir, me); !reflect.DeepEqual(got, []uint64{2}) {
		t.Fatalf("other sources %v, want [2]", got)
	}
	if got := OtherSources(t.TempDir(), me); got != nil {
		t.Fatalf("empty store: %v", got)
	}
}
