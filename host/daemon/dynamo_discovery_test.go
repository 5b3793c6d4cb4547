package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// With events.dynamo_file_kv the running host lists its publisher (its
// publisher_id, worker_id and dp_rank) in Dynamo's file discovery store,
// and the listing is gone once the host stops.
func TestHostListsItselfInDynamoFileDiscovery(t *testing.T) {
	c := testConfig(t)
	c.HTTP.Listen = ""
	c.WorkerID = 2769957934671139
	c.Events.DPRank = 3
	c.Events.PublisherID = 0xabc
	c.Events.DynamoFileKV = t.TempDir()
	_, stop := start(t, c)
	sources := filepath.Join(c.Events.DynamoFileKV, "v1", "event_sources")
	ents, err := os.ReadDir(sources)
	if err != nil || len(ents) != 1 {
		t.Fatalf("event sources: %v (%v)", ents, err)
	}
	b, err := os.ReadFile(filepath.Join(sources, ents[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		PublisherID uint64 `json:"publisher_id"`
		Metadata    struct {
			Worker struct {
				WorkerID uint64 `json:"worker_id"`
				DPRank   uint32 `json:"dp_rank"`
			} `json:"worker"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.PublisherID != 0xabc || rec.Metadata.Worker.WorkerID != c.WorkerID || rec.Metadata.Worker.DPRank != 3 {
		t.Fatalf("listed %s", b)
	}
	if _, err := os.Stat(filepath.Join(c.Events.DynamoFileKV, "v1", "event_channels", ents[0].Name())); err != nil {
		t.Fatal(err)
	}
	stop()
	if ents, _ := os.ReadDir(sources); len(ents) != 0 {
		t.Fatalf("%d event sources listed after the host stopped", len(ents))
	}
}
