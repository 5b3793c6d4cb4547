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

// redisBackend keeps each page as two keys: the page's bytes in a string
// and its metadata in a hash beside it, so a Stat or a List reads the
// metadata without the page. A string takes the page as it arrives (a
// hash field would be copied once more inside the server). Both keys carry
// the object name as their hash tag, {name}, so they share a cluster slot
// and every write and read of the pair is one MULTI/EXEC: a reader never
// sees one page's bytes with another's checksum. Names differ, so pages
// still spread over the primaries.
type redisBackend struct {
	c      redis.UniversalClient
	direct *redisDirect // pages' bytes, where it can (redisdirect.go)
	log    hclog.Logger
	prefix string
	desc   string
}

// Key suffixes: the page's bytes and its metadata.
const (
	pageSuffix = "}:page"
	metaSuffix = "}:meta"
)

// keys returns the object's page and metadata keys. Should a name hold a
// '}', the tag ends there, still the same for both keys.
func (b *redisBackend) keys(name string) (page, meta string) {
	base := b.prefix + "{" + name
	return base + pageSuffix, base + metaSuffix
}

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
	return &redisBackend{c: c, direct: newRedisDirect(o.Username, o.Password), log: o.Logger, prefix: "kvpilot:" + o.Bucket + ":",
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

func (b *redisBackend) Put(ctx context.Context, name string, meta Meta, page []byte, sum *Sum) error {
	// Every metadata field is written, empty when absent, so a replaced
	// page keeps nothing of the one before (a parent it no longer has).
	// The checksum goes as itself: the client writes it after the page,
	// when the hash has had the page's send to finish.
	args := make([]any, 0, 2*len(metaKeys))
	for _, k := range metaKeys {
		if k == metaSum {
			args = append(args, k, sum)
			continue
		}
		args = append(args, k, meta[k])
	}
	pk, mk := b.keys(name)
	return b.retry(ctx, func() error {
		_, err := b.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, pk, page, 0)
			p.HSet(ctx, mk, args...)
			return nil
		})
		return err
	})
}

func (b *redisBackend) Get(ctx context.Context, name string, dst []byte) (Meta, error) {
	pk, mk := b.keys(name)
	if addr, ok := b.addrFor(ctx, pk); ok {
		meta, err := b.direct.get(ctx, addr, pk, mk, dst)
		if !errors.Is(err, errIndirect) {
			return meta, err
		}
		b.log.Debug("redis get goes through the client", "object", name, "error", err)
	}
	var (
		pc *redis.StringCmd
		mc *redis.SliceCmd
	)
	err := b.retry(ctx, func() error {
		_, err := b.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			pc = p.Get(ctx, pk)
			mc = p.HMGet(ctx, mk, metaKeys...)
			return nil
		})
		return err
	})
	if err != nil && !errors.Is(err, redis.Nil) { // Nil: an absent page, read below
		return nil, err
	}
	vals, err := mc.Result()
	if err != nil {
		return nil, err
	}
	page, perr := pc.Result()
	switch {
	case errors.Is(perr, redis.Nil) && allNil(vals):
		return nil, errNotFound
	case errors.Is(perr, redis.Nil):
		return metaFrom(vals), fmt.Errorf("%w: metadata without a page", errDamaged)
	case perr != nil:
		return nil, perr
	}
	meta := metaFrom(vals)
	if len(page) != len(dst) {
		return meta, fmt.Errorf("%w: object is %d bytes, a page is %d", errDamaged, len(page), len(dst))
	}
	// A page without metadata fails the Store's checks. The checksum is
	// taken from the reply while the copy runs, rather than from dst after
	// it (pagesum.go).
	meta[metaReadSum] = copySummed(dst, page)
	return meta, nil
}

func (b *redisBackend) Stat(ctx context.Context, name string) (Meta, error) {
	_, mk := b.keys(name)
	var vals []any
	err := b.retry(ctx, func() (err error) {
		vals, err = b.c.HMGet(ctx, mk, metaKeys...).Result()
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
	pk, mk := b.keys(name)
	return b.retry(ctx, func() error { return b.c.Del(ctx, pk, mk).Err() })
}

// List scans every primary for the metadata keys of the prefix's objects,
// then reads them in one pipeline per primary.
func (b *redisBackend) List(ctx context.Context, prefix string) ([]Object, error) {
	match := globEscape(b.prefix+"{"+prefix) + "*" + globEscape(metaSuffix)
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
		name := strings.TrimSuffix(strings.TrimPrefix(k, b.prefix+"{"), metaSuffix)
		out = append(out, Object{Name: name, Meta: metaFrom(vals)})
	}
	return out, nil
}

func (b *redisBackend) Close() error {
	b.direct.close()
	return b.c.Close()
}

// addrFor is the server that holds key, for the direct path: the one
// server, or the primary of key's slot as the cluster client last mapped
// it (a stale map gets a MOVED, and the call goes through the client).
func (b *redisBackend) addrFor(ctx context.Context, key string) (string, bool) {
	switch c := b.c.(type) {
	case *redis.Client:
		return c.Options().Addr, true
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return "", false
		}
		return n.Options().Addr, true
	}
	return "", false
}

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
