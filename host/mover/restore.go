package mover

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
)

// RestoreResult reports a Restore or Import.
type RestoreResult struct {
	// Inserted pages became resident on the tier in the index; Present
	// were already.
	Inserted, Present int
	// Orphans are stored pages whose parent is not stored on the tier:
	// they cannot be matched, so they are not indexed.
	Orphans int
	// Mismatched pages' links do not chain to their sequence hash.
	Mismatched int
}

// Restore puts every page of a key-addressed tier (disk or remote) back
// into the index, parents before children: what a host does at start so
// that pages paused or written to disk before a restart are found again.
func (m *Mover) Restore(ctx context.Context, t tier.Tier) (RestoreResult, error) {
	st := m.pools.Store(t)
	if st == nil {
		return RestoreResult{}, fmt.Errorf("restore %s: %w", t, ErrNoPool)
	}
	entries, err := st.List(ctx)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("restore %s: %w", t, err)
	}
	byKey := make(map[pool.Key]pool.Entry, len(entries))
	for _, e := range entries {
		byKey[e.Key] = e
	}
	var res RestoreResult
	state := make(map[pool.Key]int8, len(entries)) // 0 new, 1 in progress, 2 inserted, 3 failed
	m.ix.Do(func(ix *cache.Index) {
		m.restore(ix, t, entries, byKey, state, &res)
	})
	return res, nil
}

// restore inserts entries into ix, the index the caller holds, each
// after the parent it chains to (state tracks each key's progress).
func (m *Mover) restore(ix *cache.Index, t tier.Tier, entries []pool.Entry, byKey map[pool.Key]pool.Entry, state map[pool.Key]int8, res *RestoreResult) {
	var insert func(e pool.Entry) bool
	insert = func(e pool.Entry) bool {
		switch state[e.Key] {
		case 2:
			return true
		case 1, 3:
			return false
		}
		state[e.Key] = 1
		if e.HasParent {
			pk := pool.Key{Namespace: e.Namespace, Seq: e.Parent}
			parent, stored := byKey[pk]
			onTier := false
			if pi, ok := ix.Lookup(e.Namespace, e.Parent); ok && pi.Tiers.Has(t) {
				onTier = true
			}
			if !onTier && (!stored || !insert(parent)) {
				res.Orphans++
				state[e.Key] = 3
				return false
			}
		}
		ok := m.insert(ix, t, e, res)
		state[e.Key] = map[bool]int8{true: 2, false: 3}[ok]
		return ok
	}
	for _, e := range entries {
		insert(e)
	}
}

// insert indexes one stored page in ix, the index the caller holds.
func (m *Mover) insert(ix *cache.Index, t tier.Tier, e pool.Entry, res *RestoreResult) bool {
	seq, stored, err := ix.Insert(e.Namespace, e.Parent, e.HasParent, e.Local, t, 0)
	if err == nil && seq != e.Seq {
		err = fmt.Errorf("links of %v chain to %x", e.Key, seq)
	}
	if err != nil {
		res.Mismatched++
		m.log.Warn("stored page not indexed", "tier", t.String(), "key", e.Key.String(), "error", err)
		return false
	}
	if stored {
		res.Inserted++
	} else {
		res.Present++
	}
	return true
}

// Import indexes particular pages of a key-addressed tier that this host
// has not seen (another host paused them to the shared remote bucket):
// for each sequence hash it reads the stored entry and its ancestors up to
// one the index has on the tier, and inserts them root first. A Warm then
// fetches them.
func (m *Mover) Import(ctx context.Context, t tier.Tier, tenant string, seqs []uint64) (RestoreResult, error) {
	st := m.pools.Store(t)
	if st == nil {
		return RestoreResult{}, fmt.Errorf("import from %s: %w", t, ErrNoPool)
	}
	var res RestoreResult
	ns := m.ix.Namespace(tenant) // stores key pages by namespace, not tenant
	for _, seq := range seqs {
		var chain []pool.Entry
		key := pool.Key{Namespace: ns, Seq: seq}
		for depth := 0; ; depth++ {
			if depth > 1<<16 {
				return res, fmt.Errorf("import %v from %s: parent chain does not end", key, t)
			}
			var known bool
			m.ix.Do(func(ix *cache.Index) {
				pi, ok := ix.Lookup(tenant, key.Seq)
				known = ok && pi.Tiers.Has(t)
			})
			if known {
				break
			}
			e, err := st.Stat(ctx, key)
			if errors.Is(err, pool.ErrNotFound) {
				res.Orphans++
				chain = nil
				break
			}
			if err != nil {
				return res, fmt.Errorf("import %v from %s: %w", key, t, err)
			}
			chain = append(chain, e)
			if !e.HasParent {
				break
			}
			key = pool.Key{Namespace: ns, Seq: e.Parent}
		}
		m.ix.Do(func(ix *cache.Index) {
			for i := len(chain) - 1; i >= 0; i-- {
				if !m.insert(ix, t, chain[i], &res) {
					break
				}
			}
		})
	}
	return res, nil
}
