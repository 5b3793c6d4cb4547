package meta

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

func TestSaveLoadReplace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1800000000, 0).UTC()
	snap := Snapshot{
		Pins:   []Pin{{Tenant: "a", Seq: 1, Count: 2, TTL: time.Minute, Expiry: at}, {Tenant: "b", Seq: ^uint64(0), Count: 1, TTL: time.Hour, Expiry: at}},
		Leases: []Lease{{ID: "L1", Tenant: "a", Tier: tier.Disk, Seqs: []uint64{1, 2}, Expiry: at}},
	}
	if err := s.Save(snap); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Load()
	if err != nil || !reflect.DeepEqual(got, snap) {
		t.Fatalf("reopened: %+v %v, want %+v", got, err, snap)
	}
	// A later save replaces, never merges.
	if err := s.Save(Snapshot{Pins: snap.Pins[:1]}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Load()
	if len(got.Pins) != 1 || len(got.Leases) != 0 {
		t.Fatalf("after replace: %+v", got)
	}
}

func TestSecondOpenFailsClearly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open(path); err == nil {
		t.Fatal("a second host opened the same metadata store")
	}
}
