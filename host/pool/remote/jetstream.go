package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/natsembed"
)

// JetStreamOptions configure the JetStream backend.
type JetStreamOptions struct {
	// JS is the JetStream API on the host's NATS connection (natsembed).
	JS jetstream.JetStream
	// Bucket is the object store bucket (default DefaultBucket). It is
	// created if missing; an existing bucket's settings are kept.
	Bucket string
	// Replicas for a new bucket on a cluster (default 1).
	Replicas int
	// MaxBytes caps a new bucket's size; 0 is unlimited.
	MaxBytes int64
	// ChunkSize is the object chunk size (default 256 KiB; keep it under
	// the server's max payload).
	ChunkSize uint32
	// ReadAttempt bounds one try at reading an object (default 10 s).
	// A read whose stream lost its leader mid-way can stall until its
	// context ends; a fresh try reaches the new leader.
	ReadAttempt time.Duration
	// WriteAttempt bounds one try at writing or deleting an object
	// (default 10 s), for the same reason.
	WriteAttempt time.Duration
	// Patience bounds how long a call keeps trying while the cluster has
	// no leader for the bucket's stream (default 30 s): see retry.
	Patience time.Duration
}

// jsBackend keeps pages as objects of a JetStream object store, which
// checks each object's SHA-256 digest on read.
type jsBackend struct {
	o   JetStreamOptions
	obs jetstream.ObjectStore
}

func newJetStream(o JetStreamOptions) (*jsBackend, error) {
	if o.JS == nil {
		return nil, fmt.Errorf("remote store: no JetStream connection")
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
	if o.ReadAttempt <= 0 {
		o.ReadAttempt = 10 * time.Second
	}
	if o.WriteAttempt <= 0 {
		o.WriteAttempt = 10 * time.Second
	}
	if o.Patience <= 0 {
		o.Patience = 30 * time.Second
	}
	return &jsBackend{o: o}, nil
}

// bind binds to (creating if needed) the bucket; Store.bind retries it.
func (b *jsBackend) bind(ctx context.Context) error {
	obs, err := b.o.JS.ObjectStore(ctx, b.o.Bucket)
	if err == nil {
		b.obs = obs
		return nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("bucket %s: %w", b.o.Bucket, err)
	}
	obs, err = b.o.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      b.o.Bucket,
		Description: "kvpilot KV cache pages",
		Storage:     jetstream.FileStorage,
		Replicas:    b.o.Replicas,
		MaxBytes:    b.o.MaxBytes,
	})
	if err != nil {
		// Another host may have created it between our two calls.
		if again, aerr := b.o.JS.ObjectStore(ctx, b.o.Bucket); aerr == nil {
			b.obs = again
			return nil
		}
		return fmt.Errorf("create bucket %s: %w", b.o.Bucket, err)
	}
	b.obs = obs
	return nil
}

func (b *jsBackend) Describe() string { return "jetstream bucket " + b.o.Bucket }

func (b *jsBackend) Put(ctx context.Context, name string, meta Meta, page []byte, sum *Sum) error {
	h := nats.Header{}
	for k, v := range meta {
		h.Set(k, v)
	}
	return b.retry(ctx, b.o.WriteAttempt, func(ctx context.Context) error {
		// A try that failed may have set the checksum already; a
		// replaced object keeps its name, so trying again is safe.
		r := &sumAtEOF{r: bytes.NewReader(page), h: h, sum: sum}
		_, err := b.obs.Put(ctx, jetstream.ObjectMeta{Name: name, Headers: h,
			Opts: &jetstream.ObjectMetaOptions{ChunkSize: b.o.ChunkSize}}, r)
		return err
	})
}

// sumAtEOF reads a page and, at its end, adds the checksum to the
// object's headers. The object store publishes the headers in its meta
// message once the reader is exhausted, in the same goroutine, so the hash
// runs while the chunks are published. The conformance suite's tampered
// page, whose JetStream digest is valid, fails if the checksum is ever
// missing.
type sumAtEOF struct {
	r   *bytes.Reader // not embedded: a WriteTo would skip Read
	h   nats.Header
	sum *Sum
}

func (r *sumAtEOF) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err == io.EOF && r.sum != nil {
		r.h.Set(metaSum, r.sum.Value())
		r.sum = nil
	}
	return n, err
}

// retry runs op as natsembed.RetryBetweenLeaders does: a bucket's stream
// between leaders (its first moments at three replicas, a lost node, a
// rolling restart) is waited for, within Patience. Every call retried is
// idempotent: a put replaces the object of its name, a delete of an
// absent object succeeds, a read reads again.
func (b *jsBackend) retry(ctx context.Context, attempt time.Duration, op func(context.Context) error) error {
	return natsembed.RetryBetweenLeaders(ctx, attempt, b.o.Patience, op)
}

// Get reads an object, trying again as retry says: the ordered consumer
// behind a read whose leader was lost mid-way otherwise waits out the
// whole context.
func (b *jsBackend) Get(ctx context.Context, name string, dst []byte) (Meta, error) {
	var meta Meta
	err := b.retry(ctx, b.o.ReadAttempt, func(ctx context.Context) error {
		var err error
		meta, err = b.getOnce(ctx, name, dst)
		return err
	})
	return meta, err
}

func (b *jsBackend) getOnce(ctx context.Context, name string, dst []byte) (Meta, error) {
	res, err := b.obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return nil, err
	}
	meta := metaOf(info.Headers)
	if info.Size != uint64(len(dst)) {
		return meta, fmt.Errorf("%w: object is %d bytes, a page is %d", errDamaged, info.Size, len(dst))
	}
	if _, err := io.ReadFull(res, dst); err != nil {
		if errors.Is(err, jetstream.ErrDigestMismatch) {
			return meta, fmt.Errorf("%w: %v", errDamaged, err)
		}
		return meta, err
	}
	// The digest is checked when the reader reaches the end.
	var one [1]byte
	for {
		n, err := res.Read(one[:])
		switch {
		case n > 0:
			return meta, fmt.Errorf("%w: object longer than its recorded size", errDamaged)
		case err == io.EOF:
			return meta, nil
		case errors.Is(err, jetstream.ErrDigestMismatch):
			return meta, fmt.Errorf("%w: %v", errDamaged, err)
		case err != nil:
			return meta, err
		}
	}
}

func (b *jsBackend) Stat(ctx context.Context, name string) (Meta, error) {
	var info *jetstream.ObjectInfo
	err := b.retry(ctx, b.o.ReadAttempt, func(ctx context.Context) error {
		var err error
		info, err = b.obs.GetInfo(ctx, name)
		return err
	})
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return metaOf(info.Headers), nil
}

func (b *jsBackend) Delete(ctx context.Context, name string) error {
	return b.retry(ctx, b.o.WriteAttempt, func(ctx context.Context) error {
		err := b.obs.Delete(ctx, name)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil
		}
		return err
	})
}

func (b *jsBackend) List(ctx context.Context, prefix string) ([]Object, error) {
	infos, err := b.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, in := range infos {
		if len(in.Name) >= len(prefix) && in.Name[:len(prefix)] == prefix {
			out = append(out, Object{Name: in.Name, Meta: metaOf(in.Headers)})
		}
	}
	return out, nil
}

func (b *jsBackend) Close() error { return nil } // the connection is the host's

func metaOf(h nats.Header) Meta {
	m := Meta{}
	for _, k := range metaKeys {
		if v := h.Get(k); v != "" {
			m[k] = v
		}
	}
	return m
}

// digests: JetStream checks each object's SHA-256 digest on read.
func (b *jsBackend) digests() bool { return true }
