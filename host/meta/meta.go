// Package meta persists the cache metadata that must survive a host restart:
// pins and pause leases. Pages themselves survive in the
// disk tier's page files; this store says which of them were pinned or
// paused, until when, so a restarted host keeps its promises.
//
// The store is a bbolt file under the data dir. Each Save replaces the whole
// snapshot in one transaction, so a crash leaves the previous snapshot or
// the new one, never a mix. Times are stored as wall-clock instants, since
// the index's monotonic clock restarts with the process.
package meta

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/kvpilot/kvpilot/host/tier"
)

var (
	bucketPins   = []byte("pins")
	bucketLeases = []byte("leases")
	bucketInfo   = []byte("info")
	keyVersion   = []byte("version")
)

// version is the snapshot format; a store written by a newer host is refused
// rather than misread.
const version = "1"

// Pin is one page's own pin references.
type Pin struct {
	Tenant string        `json:"tenant"`
	Seq    uint64        `json:"seq"`
	Count  int           `json:"count"`
	TTL    time.Duration `json:"ttl"`
	Expiry time.Time     `json:"expiry"`
}

// Lease is one pause lease.
type Lease struct {
	ID     string    `json:"id"`
	Tenant string    `json:"tenant"`
	Tier   tier.Tier `json:"tier"`
	Seqs   []uint64  `json:"seqs"`
	Expiry time.Time `json:"expiry"`
}

// Snapshot is everything the store keeps.
type Snapshot struct {
	Pins   []Pin
	Leases []Lease
}

// Store is an open metadata file.
type Store struct{ db *bolt.DB }

// Open opens (creating) the store at path. A second host on the same data
// dir waits up to a second for the file lock, then fails.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("open metadata store %s: %w (is another host using this data_dir?)", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketInfo)
		if err != nil {
			return err
		}
		switch v := b.Get(keyVersion); {
		case v == nil:
			return b.Put(keyVersion, []byte(version))
		case string(v) != version:
			return fmt.Errorf("metadata format %q, this host reads %q: use a matching kvpilot or a fresh data_dir", v, version)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("metadata store %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// Save replaces the stored snapshot.
func (s *Store) Save(snap Snapshot) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketPins, bucketLeases} {
			if err := tx.DeleteBucket(name); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
				return err
			}
		}
		pins, err := tx.CreateBucket(bucketPins)
		if err != nil {
			return err
		}
		for i, p := range snap.Pins {
			if err := putJSON(pins, fmt.Appendf(nil, "%08d", i), p); err != nil {
				return err
			}
		}
		leases, err := tx.CreateBucket(bucketLeases)
		if err != nil {
			return err
		}
		for _, l := range snap.Leases {
			if err := putJSON(leases, []byte(l.ID), l); err != nil {
				return err
			}
		}
		return nil
	})
}

// Load reads the stored snapshot. Records that do not decode are skipped
// and counted in the error (the rest is still returned).
func (s *Store) Load() (Snapshot, error) {
	var snap Snapshot
	var bad int
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketPins); b != nil {
			_ = b.ForEach(func(_, v []byte) error {
				var p Pin
				if json.Unmarshal(v, &p) != nil {
					bad++
					return nil
				}
				snap.Pins = append(snap.Pins, p)
				return nil
			})
		}
		if b := tx.Bucket(bucketLeases); b != nil {
			_ = b.ForEach(func(_, v []byte) error {
				var l Lease
				if json.Unmarshal(v, &l) != nil || !l.Tier.Valid() {
					bad++
					return nil
				}
				snap.Leases = append(snap.Leases, l)
				return nil
			})
		}
		return nil
	})
	if err == nil && bad > 0 {
		err = fmt.Errorf("metadata store: %d records could not be read and were skipped", bad)
	}
	return snap, err
}

func putJSON(b *bolt.Bucket, k []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(k, raw)
}
