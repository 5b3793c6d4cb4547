// Package remote is the remote tier: pages as objects in a NATS JetStream
// object store. The bucket lives on the embedded server by
// default or on a cluster every host shares, so pinned and paused pages
// become reachable from any worker.
//
// Object names are <layout fingerprint>/=<escaped namespace>/<sequence
// hash in hex>, so models and tenants never mix and any host with the same
// layout finds the same page. Each object also carries its key in headers;
// a page whose size, headers or digest (checked by the object store on
// read) disagree is dropped, counted and reported, never served.
package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
)

// DefaultBucket is the object store bucket shared by every host.
const DefaultBucket = "kvpilot-pages"

// Object headers. They restate the key so a page is checked against what
// the name says, not just trusted.
const (
	hdrLayout    = "Kvpilot-Layout"
	hdrNamespace = "Kvpilot-Namespace"
	hdrSeq       = "Kvpilot-Seq"
	hdrLocal     = "Kvpilot-Local"
	hdrParent    = "Kvpilot-Parent"
)

// Options configure a remote Store.
type Options struct {
	// JS is the JetStream API on the host's NATS connection (natsembed).
	JS jetstream.JetStream
	// Bucket is the object store bucket (default DefaultBucket). It is
	// created if missing; an existing bucket's settings are kept.
	Bucket string
	// Layout is the page shape; it is cloned.
	Layout *layout.Layout
	// Replicas for a new bucket on a cluster (default 1).
	Replicas int
	// MaxBytes caps a new bucket's size; 0 is unlimited.
	MaxBytes int64
	// ChunkSize is the object chunk size (default 256 KiB; keep it under
	// the server's max payload).
	ChunkSize uint32
	// Logger receives warnings about dropped pages; nil discards.
	Logger hclog.Logger
}

// Store is the remote tier for one layout. It implements pool.Store.
type Store struct {
	obs      jetstream.ObjectStore
	bucket   string
	lay      *layout.Layout
	fp       layout.Fingerprint
	prefix   string
	pb       int
	chunk    uint32
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

// Open binds to (creating if needed) the bucket and counts this layout's pages.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.JS == nil {
		return nil, fmt.Errorf("remote store: no JetStream connection")
	}
	if o.Layout == nil {
		return nil, fmt.Errorf("remote store: no layout")
	}
	if err := o.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("remote store: %w", err)
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = 256 << 10
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	lay := o.Layout.Clone()
	fp := lay.Fingerprint()
	s := &Store{bucket: o.Bucket, lay: lay, fp: fp, prefix: fp.String() + "/", pb: lay.PageBytes(),
		chunk: o.ChunkSize, log: log.Named("remote")}
	if o.MaxBytes > 0 {
		s.capacity = o.MaxBytes / int64(s.pb)
	}
	if err := s.bind(ctx, o); err != nil {
		return nil, err
	}
	s.log.Info("remote store opened", "bucket", o.Bucket, "layout", fp.String(), "pages", s.used.Load())
	return s, nil
}

func bucket(ctx context.Context, o Options) (jetstream.ObjectStore, error) {
	obs, err := o.JS.ObjectStore(ctx, o.Bucket)
	if err == nil {
		return obs, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("remote store: bucket %s: %w", o.Bucket, err)
	}
	obs, err = o.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      o.Bucket,
		Description: "kvpilot KV cache pages",
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
		MaxBytes:    o.MaxBytes,
	})
	if err != nil {
		// Another host may have created it between our two calls.
		if again, aerr := o.JS.ObjectStore(ctx, o.Bucket); aerr == nil {
			return again, nil
		}
		return nil, fmt.Errorf("remote store: create bucket %s: %w", o.Bucket, err)
	}
	return obs, nil
}

// A clustered JetStream answers nothing for a few seconds after it lost a
// node or during a rolling restart, while its streams elect leaders. Open
// retries for up to openPatience, each attempt with its own deadline, so a
// request stuck on a route to the lost node does not use up the caller's.
const (
	openAttempt  = 3 * time.Second
	openPatience = 30 * time.Second
)

// bind binds to (creating if needed) the bucket and counts this layout's
// pages, retrying while JetStream is between leaders.
func (s *Store) bind(ctx context.Context, o Options) error {
	give := time.Now().Add(openPatience)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, openAttempt)
		obs, err := bucket(actx, o)
		if err == nil {
			s.obs = obs
			_, err = s.List(actx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(give) {
			return fmt.Errorf("remote store: %d attempts: %w", attempt, err)
		}
		s.log.Warn("remote bucket not answering yet; retrying", "bucket", o.Bucket, "attempt", attempt, "error", err)
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

// Bucket is the object store bucket name.
func (s *Store) Bucket() string { return s.bucket }

// Stats returns this host's estimate of the bucket's pages of this layout.
func (s *Store) Stats() pool.Stats {
	u := s.used.Load()
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
	name := ObjectName(s.fp, key)
	h := nats.Header{}
	h.Set(hdrLayout, s.fp.String())
	h.Set(hdrNamespace, key.Namespace)
	h.Set(hdrSeq, strconv.FormatUint(key.Seq, 16))
	h.Set(hdrLocal, strconv.FormatUint(e.Local, 16))
	if e.HasParent {
		h.Set(hdrParent, strconv.FormatUint(e.Parent, 16))
	}
	_, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: name, Headers: h,
		Opts: &jetstream.ObjectMetaOptions{ChunkSize: s.chunk}}, bytes.NewReader(page))
	if err != nil {
		return fmt.Errorf("remote put %v to bucket %s: %w", key, s.bucket, err)
	}
	s.used.Add(1)
	return nil
}

// Get reads the page under key into dst, verifying size, headers and the
// object store's digest. A page failing any check is deleted from the
// bucket and reported as ErrCorrupt; dst then holds garbage.
func (s *Store) Get(ctx context.Context, key pool.Key, dst []byte) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("remote get %v: %w", key, err)
	}
	if err := pool.CheckPage(dst, s.pb); err != nil {
		return fmt.Errorf("remote get %v: %w", key, err)
	}
	name := ObjectName(s.fp, key)
	res, err := s.obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("remote get %v: %w", key, pool.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("remote get %v from bucket %s: %w", key, s.bucket, err)
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return fmt.Errorf("remote get %v: %w", key, err)
	}
	if cerr := s.checkInfo(info, key); cerr != nil {
		return s.drop(ctx, key, name, cerr)
	}
	if _, err := io.ReadFull(res, dst); err != nil {
		if errors.Is(err, jetstream.ErrDigestMismatch) {
			return s.drop(ctx, key, name, err)
		}
		return fmt.Errorf("remote get %v: %w", key, err)
	}
	// The digest is checked when the reader reaches the end.
	var one [1]byte
	for {
		n, err := res.Read(one[:])
		if n > 0 {
			return s.drop(ctx, key, name, fmt.Errorf("object longer than its recorded size"))
		}
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, jetstream.ErrDigestMismatch) {
			return s.drop(ctx, key, name, err)
		}
		if err != nil {
			return fmt.Errorf("remote get %v: %w", key, err)
		}
	}
}

func (s *Store) checkInfo(info *jetstream.ObjectInfo, key pool.Key) error {
	if info.Size != uint64(s.pb) {
		return fmt.Errorf("object is %d bytes, a page is %d", info.Size, s.pb)
	}
	h := info.Headers
	if h.Get(hdrLayout) != s.fp.String() || h.Get(hdrNamespace) != key.Namespace ||
		h.Get(hdrSeq) != strconv.FormatUint(key.Seq, 16) {
		return fmt.Errorf("object headers (layout %q, namespace %q, seq %q) do not match its name",
			h.Get(hdrLayout), h.Get(hdrNamespace), h.Get(hdrSeq))
	}
	return nil
}

// drop deletes a page that failed a check so no host is served it again.
func (s *Store) drop(ctx context.Context, key pool.Key, name string, why error) error {
	s.corrupt.Add(1)
	s.log.Warn("dropped corrupt page", "bucket", s.bucket, "object", name, "error", why)
	if err := s.obs.Delete(ctx, name); err == nil {
		s.used.Add(-1)
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		s.log.Error("deleting corrupt page", "object", name, "error", err)
	}
	return fmt.Errorf("remote get %v: %w: %v", key, pool.ErrCorrupt, why)
}

// Delete removes the page under key; an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key pool.Key) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("remote delete %v: %w", key, err)
	}
	err := s.obs.Delete(ctx, ObjectName(s.fp, key))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remote delete %v from bucket %s: %w", key, s.bucket, err)
	}
	s.used.Add(-1)
	return nil
}

// Stat returns the entry of the page under key, from its headers.
func (s *Store) Stat(ctx context.Context, key pool.Key) (pool.Entry, error) {
	if err := s.checkOpen(); err != nil {
		return pool.Entry{}, fmt.Errorf("remote stat %v: %w", key, err)
	}
	info, err := s.obs.GetInfo(ctx, ObjectName(s.fp, key))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return pool.Entry{}, fmt.Errorf("remote stat %v: %w", key, pool.ErrNotFound)
	}
	if err != nil {
		return pool.Entry{}, fmt.Errorf("remote stat %v: %w", key, err)
	}
	e, ok := entryOf(info, s.prefix)
	if !ok || e.Key != key {
		return pool.Entry{}, fmt.Errorf("remote stat %v: %w: unreadable object headers", key, pool.ErrCorrupt)
	}
	return e, nil
}

// entryOf reads an object's entry from its name and headers.
func entryOf(info *jetstream.ObjectInfo, prefix string) (pool.Entry, bool) {
	k, ok := parseName(prefix, info.Name)
	if !ok {
		return pool.Entry{}, false
	}
	e := pool.Entry{Key: k}
	local, err := strconv.ParseUint(info.Headers.Get(hdrLocal), 16, 64)
	if err != nil {
		return pool.Entry{}, false
	}
	e.Local = local
	if p := info.Headers.Get(hdrParent); p != "" {
		parent, err := strconv.ParseUint(p, 16, 64)
		if err != nil {
			return pool.Entry{}, false
		}
		e.Parent, e.HasParent = parent, true
	}
	return e, true
}

// List returns every page of this layout in the bucket (from every host)
// and refreshes the Used estimate. Objects with unreadable headers are
// left out.
func (s *Store) List(ctx context.Context) ([]pool.Entry, error) {
	infos, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		s.used.Store(0)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote list bucket %s: %w", s.bucket, err)
	}
	var out []pool.Entry
	for _, in := range infos {
		if e, ok := entryOf(in, s.prefix); ok {
			out = append(out, e)
		}
	}
	s.used.Store(int64(len(out)))
	return out, nil
}

// Sync is a no-op: a Put returns after JetStream acknowledged every chunk,
// so the page is as durable as the server's storage makes it.
func (s *Store) Sync() error { return nil }

// Close stops using the bucket. The NATS connection belongs to the caller.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

var _ pool.Store = (*Store)(nil)
