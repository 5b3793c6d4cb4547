package remote

import (
	"context"
	"errors"
)

// Backend is the store the remote tier's objects live in: a JetStream
// object store (jetstream.go, the default, on the embedded server or a
// cluster) or a Redis or Valkey deployment (redis.go). Names and metadata
// are the Store's; a backend keeps them with the page and gives them back.
// Checksums, names and the checks on what comes back are the Store's too,
// so every backend is verified alike.
type Backend interface {
	// Put stores page under name with its metadata, replacing any object
	// of that name. sum is the page's checksum, stored as metaSum (meta
	// lacks it); it is still being computed, so a backend asks for its
	// Value only once the page's bytes are on their way.
	Put(ctx context.Context, name string, meta Meta, page []byte, sum *Sum) error
	// Get reads the object under name into dst and returns its metadata.
	// It returns errNotFound when there is none, and an error wrapping
	// errDamaged when the backend finds the object damaged (its size is
	// not len(dst), or its own digest fails).
	Get(ctx context.Context, name string, dst []byte) (Meta, error)
	// Stat returns an object's metadata without its page (errNotFound).
	Stat(ctx context.Context, name string) (Meta, error)
	// Delete removes an object; an absent one is not an error.
	Delete(ctx context.Context, name string) error
	// List returns the name and metadata of every object whose name starts
	// with prefix.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Describe names the backend and where it stores, for logs.
	Describe() string
	// Close releases what the backend holds (not a shared connection).
	Close() error
}

// Object is one listed object.
type Object struct {
	Name string
	Meta Meta
}

// Meta is an object's metadata: the key it holds and the page's checksum,
// restated beside the page so that what comes back is checked, not
// trusted.
type Meta map[string]string

// Metadata keys (JetStream carries them as these header names).
const (
	metaLayout    = "Kvpilot-Layout"
	metaNamespace = "Kvpilot-Namespace"
	metaSeq       = "Kvpilot-Seq"
	metaLocal     = "Kvpilot-Local"
	metaParent    = "Kvpilot-Parent"
	metaSum       = "Kvpilot-Sum" // xxh3 of the page, hex; absent on pages written before it
	// metaReadSum is never stored: a backend's Get may set it to the
	// checksum of the bytes it copied into dst, hashed beside the copy,
	// and the Store then checks it instead of hashing dst once more.
	metaReadSum = "Kvpilot-Read-Sum"
)

var metaKeys = []string{metaLayout, metaNamespace, metaSeq, metaLocal, metaParent, metaSum}

var (
	errNotFound = errors.New("object not found")
	errDamaged  = errors.New("object damaged")
	// errRefused marks a failure no retry can mend (a wrong password):
	// Open reports it at once instead of waiting for the store to answer.
	errRefused = errors.New("refused")
)
