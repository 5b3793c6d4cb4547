package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// RedisOptions configure the Redis backend (Redis or Valkey, a single
// server or a cluster).
type RedisOptions struct {
	// Addrs are host:port addresses; several name a cluster's nodes.
	Addrs []string
	// Cluster uses the cluster protocol with one address too (a cluster's
	// configuration endpoint).
	Cluster bool
	// Username and Password authenticate, when the server requires it.
	Username, Password string
	// Bucket names the keyspace, as JetStream's bucket does: keys are
	// kvpilot:<bucket>:<object name> (default DefaultBucket).
	Bucket string
	// Logger receives the client's own messages (reconnects, failovers)
	// at debug level; nil discards them.
	Logger hclog.Logger
}

// redisLog carries the Redis client's messages to hclog. The client has
// one logger for the process, so the last backend made sets it.
type redisLog struct{ log hclog.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...))
}

// redisBackend keeps each page in one hash: the page's bytes under the
// field "page" and its metadata beside it, so a Put is one atomic command
// and a Stat or List reads the metadata without the page. Each key hashes
// to its own cluster slot, which spreads pages over the primaries.
type redisBackend struct {
	c      redis.UniversalClient
	prefix string
	desc   string
}

const pageField = "page"

// NewRedis connects to Redis (or Valkey) and returns the backend; Open
// checks the connection.
func NewRedis(o RedisOptions) (Backend, error) {
	if len(o.Addrs) == 0 {
		return nil, fmt.Errorf("remote store: redis: no address")
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	redis.SetLogger(redisLog{o.Logger})
	c := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:         o.Addrs,
		IsClusterMode: o.Cluster,
		Username:      o.Username,
		Password:      o.Password,
		// Pages are megabytes: the default read and write timeouts (3 s)
		// stand, but retries back off so a failover can finish.
		MaxRetries: 5,
	})
	return &redisBackend{c: c, prefix: "kvpilot:" + o.Bucket + ":",
		desc: fmt.Sprintf("redis %s (keys kvpilot:%s:)", strings.Join(o.Addrs, ","), o.Bucket)}, nil
}

func (b *redisBackend) bind(ctx context.Context) error {
	err := b.c.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	if msg := err.Error(); strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS") {
		return fmt.Errorf("redis: %w: %v (check pools.remote_redis.username and password_file)", errRefused, err)
	}
	return fmt.Errorf("redis ping: %w", err)
}

func (b *redisBackend) Describe() string { return b.desc }

// retry runs op, and once more after reloading the cluster's slot map
// when it failed: after a failover the client keeps sending a dead
// primary's slots to it until its map is reloaded, which it otherwise
// does only every few seconds.
func (b *redisBackend) retry(ctx context.Context, op func() error) error {
	err := op()
	cc, ok := b.c.(*redis.ClusterClient)
	if err == nil || !ok || errors.Is(err, redis.Nil) || ctx.Err() != nil {
		return err
	}
	cc.ReloadState(ctx)
	return op()
}

func (b *redisBackend) Put(ctx context.Context, name string, meta Meta, page []byte) error {
	// Every metadata field is written, empty when absent, so one HSET
	// replaces a page whole (a parent it no longer has included) without
	// a transaction.
	args := make([]any, 0, 2+2*len(metaKeys))
	args = append(args, pageField, page)
	for _, k := range metaKeys {
		args = append(args, k, meta[k])
	}
	key := b.prefix + name
	return b.retry(ctx, func() error { return b.c.HSet(ctx, key, args...).Err() })
}

func (b *redisBackend) Get(ctx context.Context, name string, dst []byte) (Meta, error) {
	var vals []any
	err := b.retry(ctx, func() (err error) {
		vals, err = b.c.HMGet(ctx, b.prefix+name, append([]string{pageField}, metaKeys...)...).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	page, ok := vals[0].(string)
	if !ok {
		if vals[0] == nil && allNil(vals) {
			return nil, errNotFound
		}
		return nil, fmt.Errorf("%w: no page field", errDamaged)
	}
	meta := metaFrom(vals[1:])
	if len(page) != len(dst) {
		return meta, fmt.Errorf("%w: object is %d bytes, a page is %d", errDamaged, len(page), len(dst))
	}
	copy(dst, page)
	return meta, nil
}

func (b *redisBackend) Stat(ctx context.Context, name string) (Meta, error) {
	var vals []any
	err := b.retry(ctx, func() (err error) {
		vals, err = b.c.HMGet(ctx, b.prefix+name, metaKeys...).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	if allNil(vals) {
		return nil, errNotFound
	}
	return metaFrom(vals), nil
}

func (b *redisBackend) Delete(ctx context.Context, name string) error {
	return b.retry(ctx, func() error { return b.c.Del(ctx, b.prefix+name).Err() })
}

// List scans every primary for the prefix's keys, then reads their
// metadata in one pipeline per primary.
func (b *redisBackend) List(ctx context.Context, prefix string) ([]Object, error) {
	match := globEscape(b.prefix+prefix) + "*"
	var (
		out  []Object
		scan = func(ctx context.Context, c *redis.Client) error {
			var keys []string
			it := c.Scan(ctx, 0, match, 512).Iterator()
			for it.Next(ctx) {
				keys = append(keys, it.Val())
			}
			if err := it.Err(); err != nil {
				return err
			}
			objs, err := b.metas(ctx, c, keys)
			out = append(out, objs...)
			return err
		}
	)
	if cc, ok := b.c.(*redis.ClusterClient); ok {
		var mu sync.Mutex // ForEachMaster runs primaries concurrently
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, c)
		})
		return out, err
	}
	c, ok := b.c.(*redis.Client)
	if !ok {
		return nil, fmt.Errorf("redis: unexpected client %T", b.c)
	}
	return out, scan(ctx, c)
}

func (b *redisBackend) metas(ctx context.Context, c *redis.Client, keys []string) ([]Object, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.SliceCmd, len(keys))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, k, metaKeys...)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]Object, 0, len(keys))
	for i, k := range keys {
		vals, err := cmds[i].Result()
		if err != nil || allNil(vals) {
			continue // deleted since the scan
		}
		out = append(out, Object{Name: strings.TrimPrefix(k, b.prefix), Meta: metaFrom(vals)})
	}
	return out, nil
}

func (b *redisBackend) Close() error { return b.c.Close() }

func metaFrom(vals []any) Meta {
	m := Meta{}
	for i, k := range metaKeys {
		if s, ok := vals[i].(string); ok && s != "" {
			m[k] = s
		}
	}
	return m
}

func allNil(vals []any) bool {
	for _, v := range vals {
		if v != nil {
			return false
		}
	}
	return true
}

// globEscape quotes SCAN MATCH's pattern characters.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
