// Package remote is the remote tier: pages as objects in a store every host
// can reach, so pinned and paused pages become reachable from any worker.
// The store is a Backend: a NATS JetStream object store (the default, on
// the embedded server or a cluster) or Redis/Valkey (a single server or a
// cluster with replicas).
//
// Object names are <layout fingerprint>/=<escaped namespace>/<sequence
// hash in hex>, so models and tenants never mix and any host with the same
// layout finds the same page. Each object also carries its key and the
// page's xxh3 checksum as metadata; a page whose size, metadata or
// checksum (or the backend's own digest) disagree is dropped, counted and
// reported, never served.
package remote

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
)

// DefaultBucket is the object store bucket shared by every host.
const DefaultBucket = "kvpilot-pages"

// Options configure a remote Store.
type Options struct {
	// Backend is where the objects live. Nil: a JetStream object store
	// from the fields below.
	Backend Backend
	// JS is the JetStream API on the host's NATS connection (natsembed).
	JS jetstream.JetStream
	// Bucket is the object store bucket (default DefaultBucket). It is
	// created if missing; an existing bucket's settings are kept.
	Bucket string
	// Layout is the page shape; it is cloned.
	Layout *layout.Layout
	// Replicas for a new bucket on a cluster (default 1).
	Replicas int
	// MaxBytes caps a new bucket's size (and, with any backend, sets the
	// page capacity this host reports); 0 is unlimited.
	MaxBytes int64
	// ChunkSize is the object chunk size (default 256 KiB; keep it under
	// the server's max payload).
	ChunkSize uint32
	// Logger receives warnings about dropped pages; nil discards.
	Logger hclog.Logger
}

// Store is the remote tier for one layout. It implements pool.Store.
type Store struct {
	be       Backend
	lay      *layout.Layout
	fp       layout.Fingerprint
	prefix   string
	pb       int
	capacity int64
	log      hclog.Logger

	// used is this host's view of how many pages of this layout the bucket
	// holds: counted at Open and by Keys, adjusted by Put and Delete.
	// Other hosts change the bucket too, so it is an estimate.
	used    atomic.Int64
	corrupt atomic.Int64

	mu     sync.Mutex
	closed bool
}

// Open binds to the backend (creating the bucket if needed) and counts this
// layout's pages.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Layout == nil {
		return nil, fmt.Errorf("remote store: no layout")
	}
	if err := o.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("remote store: %w", err)
	}
	be := o.Backend
	if be == nil {
		js, err := newJetStream(JetStreamOptions{JS: o.JS, Bucket: o.Bucket, Replicas: o.Replicas, MaxBytes: o.MaxBytes, ChunkSize: o.ChunkSize})
		if err != nil {
			return nil, err
		}
		be = js
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	lay := o.Layout.Clone()
	fp := lay.Fingerprint()
	s := &Store{be: be, lay: lay, fp: fp, prefix: fp.String() + "/", pb: lay.PageBytes(), log: log.Named("remote")}
	if o.MaxBytes > 0 {
		s.capacity = o.MaxBytes / int64(s.pb)
	}
	if err := s.bind(ctx); err != nil {
		return nil, err
	}
	s.log.Info("remote store opened", "backend", be.Describe(), "layout", fp.String(), "pages", s.used.Load())
	return s, nil
}

// A clustered store answers nothing for a few seconds after it lost a node
// or during a rolling restart, while it elects leaders (JetStream's
// streams, a Redis cluster's failover). Open
// retries for up to openPatience, each attempt with its own deadline, so a
// request stuck on a route to the lost node does not use up the caller's.
const (
	openAttempt  = 3 * time.Second
	openPatience = 30 * time.Second
)

// binder is a backend with a step to take before first use (JetStream
// binds to its bucket, creating it if missing).
type binder interface {
	bind(ctx context.Context) error
}

// bind readies the backend and counts this layout's pages, retrying while
// a clustered store is between leaders.
func (s *Store) bind(ctx context.Context) error {
	give := time.Now().Add(openPatience)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, openAttempt)
		var err error
		if b, ok := s.be.(binder); ok {
			err = b.bind(actx)
		}
		if err == nil {
			_, err = s.List(actx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, errRefused) {
			return fmt.Errorf("remote store: %w", err)
		}
		if ctx.Err() != nil || time.Now().After(give) {
			return fmt.Errorf("remote store: %d attempts: %w", attempt, err)
		}
		s.log.Warn("remote store not answering yet; retrying", "backend", s.be.Describe(), "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("remote store: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ObjectName is the name a key's page has in the bucket.
func ObjectName(fp layout.Fingerprint, k pool.Key) string {
	return fp.String() + "/=" + url.PathEscape(k.Namespace) + "/" + strconv.FormatUint(k.Seq, 16)
}

// parseName reads a name written by ObjectName under prefix.
func parseName(prefix, name string) (pool.Key, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return pool.Key{}, false
	}
	ns, seq, ok := strings.Cut(rest, "/")
	if !ok || !strings.HasPrefix(ns, "=") {
		return pool.Key{}, false
	}
	nsv, err := url.PathUnescape(ns[1:])
	if err != nil {
		return pool.Key{}, false
	}
	v, err := strconv.ParseUint(seq, 16, 64)
	if err != nil {
		return pool.Key{}, false
	}
	return pool.Key{Namespace: nsv, Seq: v}, true
}

// Tier is Remote.
func (s *Store) Tier() tier.Tier { return tier.Remote }

// Layout returns the store's layout (do not modify).
func (s *Store) Layout() *layout.Layout { return s.lay }

// Backend returns where the pages live.
func (s *Store) Backend() Backend { return s.be }

// Stats returns this host's estimate of the store's pages of this layout.
func (s *Store) Stats() pool.Stats {
	u := max(s.used.Load(), 0) // an estimate: absent pages deleted count too
	st := pool.Stats{Capacity: s.capacity, Used: u, PageBytes: s.pb, Corrupt: s.corrupt.Load()}
	if s.capacity > 0 {
		st.Free = max(s.capacity-u, 0)
	}
	return st
}

func (s *Store) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return pool.ErrClosed
	}
	return nil
}

// Put stores page under key, replacing any previous object.
func (s *Store) Put(ctx context.Context, e pool.Entry, page []byte) error {
	key := e.Key
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("remote put %v: %w", key, err)
	}
	if err := pool.CheckPage(page, s.pb); err != nil {
		return fmt.Errorf("remote put %v: %w", key, err)
	}
	if len(key.Namespace) > pool.MaxNamespace {
		return fmt.Errorf("remote put %v: %w: namespace of %d bytes, limit %d", key, pool.ErrKey, len(key.Namespace), pool.MaxNamespace)
	}
	sum := startSum(page)
	meta := Meta{
		metaLayout:    s.fp.String(),
		metaNamespace: key.Namespace,
		metaSeq:       strconv.FormatUint(key.Seq, 16),
		metaLocal:     strconv.FormatUint(e.Local, 16),
	}
	if e.HasParent {
		meta[metaParent] = strconv.FormatUint(e.Parent, 16)
	}
	err := s.be.Put(ctx, ObjectName(s.fp, key), meta, page, sum)
	sum.Value() // page is the caller's again only once the hash is done
	if err != nil {
		return fmt.Errorf("remote put %v to %s: %w", key, s.be.Describe(), err)
	}
	s.used.Add(1)
	return nil
}

// Get reads the page under key into dst, verifying its size, its metadata
// and its checksum. A page failing any check is deleted from the store and
// reported as ErrCorrupt; dst then holds garbage.
func (s *Store) Get(ctx context.Context, key pool.Key, dst []byte) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("remote get %v: %w", key, err)
	}
	if err := pool.CheckPage(dst, s.pb); err != nil {
		return fmt.Errorf("remote get %v: %w", key, err)
	}
	name := ObjectName(s.fp, key)
	meta, err := s.be.Get(ctx, name, dst)
	switch {
	case errors.Is(err, errNotFound):
		return fmt.Errorf("remote get %v: %w", key, pool.ErrNotFound)
	case errors.Is(err, errDamaged):
		return s.drop(ctx, key, name, err)
	case err != nil:
		return fmt.Errorf("remote get %v from %s: %w", key, s.be.Describe(), err)
	}
	if cerr := s.checkMeta(meta, key, dst); cerr != nil {
		return s.drop(ctx, key, name, cerr)
	}
	return nil
}

// checkMeta holds a page that came back to what its name says, and to its
// checksum (pages written before checksums were kept rely on the
// backend's own digest).
func (s *Store) checkMeta(meta Meta, key pool.Key, page []byte) error {
	if meta[metaLayout] != s.fp.String() || meta[metaNamespace] != key.Namespace ||
		meta[metaSeq] != strconv.FormatUint(key.Seq, 16) {
		return fmt.Errorf("object metadata (layout %q, namespace %q, seq %q) does not match its name",
			meta[metaLayout], meta[metaNamespace], meta[metaSeq])
	}
	if sum, ok := meta[metaSum]; ok {
		got, hashed := meta[metaReadSum]
		if !hashed {
			got = pageSum(page)
		}
		if got != sum {
			return fmt.Errorf("page checksum %s, stored %s", got, sum)
		}
	} else if d, ok := s.be.(digester); !ok || !d.digests() {
		return fmt.Errorf("object has no checksum")
	}
	return nil
}

// digester reports whether a backend checks a digest of its own on read.
type digester interface{ digests() bool }

// drop deletes a page that failed a check so no host is served it again.
func (s *Store) drop(ctx context.Context, key pool.Key, name string, why error) error {
	s.corrupt.Add(1)
	s.log.Warn("dropped corrupt page", "backend", s.be.Describe(), "object", name, "error", why)
	if err := s.be.Delete(ctx, name); err == nil {
		s.used.Add(-1)
	} else {
		s.log.Error("deleting corrupt page", "object", name, "error", err)
	}
	return fmt.Errorf("remote get %v: %w: %v", key, pool.ErrCorrupt, why)
}

// Delete removes the page under key; an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key pool.Key) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("remote delete %v: %w", key, err)
	}
	if err := s.be.Delete(ctx, ObjectName(s.fp, key)); err != nil {
		return fmt.Errorf("remote delete %v from %s: %w", key, s.be.Describe(), err)
	}
	s.used.Add(-1)
	return nil
}

// Stat returns the entry of the page under key, from its metadata.
func (s *Store) Stat(ctx context.Context, key pool.Key) (pool.Entry, error) {
	if err := s.checkOpen(); err != nil {
		return pool.Entry{}, fmt.Errorf("remote stat %v: %w", key, err)
	}
	name := ObjectName(s.fp, key)
	meta, err := s.be.Stat(ctx, name)
	if errors.Is(err, errNotFound) {
		return pool.Entry{}, fmt.Errorf("remote stat %v: %w", key, pool.ErrNotFound)
	}
	if err != nil {
		return pool.Entry{}, fmt.Errorf("remote stat %v: %w", key, err)
	}
	e, ok := entryOf(name, meta, s.prefix)
	if !ok || e.Key != key {
		return pool.Entry{}, fmt.Errorf("remote stat %v: %w: unreadable object metadata", key, pool.ErrCorrupt)
	}
	return e, nil
}

// entryOf reads an object's entry from its name and metadata.
func entryOf(name string, meta Meta, prefix string) (pool.Entry, bool) {
	k, ok := parseName(prefix, name)
	if !ok {
		return pool.Entry{}, false
	}
	e := pool.Entry{Key: k}
	local, err := strconv.ParseUint(meta[metaLocal], 16, 64)
	if err != nil {
		return pool.Entry{}, false
	}
	e.Local = local
	if p := meta[metaParent]; p != "" {
		parent, err := strconv.ParseUint(p, 16, 64)
		if err != nil {
			return pool.Entry{}, false
		}
		e.Parent, e.HasParent = parent, true
	}
	return e, true
}

// List returns every page of this layout in the store (from every host)
// and refreshes the Used estimate. Objects with unreadable metadata are
// left out.
func (s *Store) List(ctx context.Context) ([]pool.Entry, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("remote list: %w", err)
	}
	objs, err := s.be.List(ctx, s.prefix)
	if err != nil {
		return nil, fmt.Errorf("remote list %s: %w", s.be.Describe(), err)
	}
	var out []pool.Entry
	for _, o := range objs {
		if e, ok := entryOf(o.Name, o.Meta, s.prefix); ok {
			out = append(out, e)
		}
	}
	s.used.Store(int64(len(out)))
	return out, nil
}

// Sync is a no-op: a Put returns after the backend acknowledged the page,
// so it is as durable as the backend's storage makes it.
func (s *Store) Sync() error { return nil }

// Close stops using the store and releases the backend (a shared
// connection stays open: it belongs to the caller).
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.be.Close()
}

var _ pool.Store = (*Store)(nil)
