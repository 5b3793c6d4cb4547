package executor

import (
	"fmt"
	"strconv"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// op is one change a turn asks of the index. Directives and cache_control
// actions both become ops, so one engine checks, applies and undoes them;
// there is one op type per kind of change (kinds.go), holding only what
// that kind reads, and a Cache pin, a session Pin and pin_blocks are all a
// *pinOp.
type op interface {
	// base is what every op has: its place in the turn, its names, and its
	// outcome.
	base() *opBase
	// check is step 1: a read-only pass against the index and the turn's
	// view of it, refusing the op if it would fail.
	check(tc *turnCheck, st *turnState) *errcode.Error
	// describe is the audit log's short target description.
	describe() string
}

// reversible ops apply in step 2, under the index's journal: only they can
// still fail once the check passed (a pin over budget or quota).
type reversible interface {
	op
	apply(ix *cache.Index, tenant string) *errcode.Error
}

// committed ops commit in step 3. The check made sure they cannot fail,
// and they cannot be undone (they free pages, or hand copies to the
// mover), so they run last.
type committed interface {
	op
	commit(c *commitStep) error
}

// opBase is what every op has.
type opBase struct {
	index int
	verb  string // directive verb or cache_control action
	mode  string
	eff   directive.Effect
}

func (b *opBase) base() *opBase { return b }

// pages are the blocks an op names, by hashes or by tokens whose full
// pages are hashed; check resolves them to the cached pages.
type pages struct {
	hashes  []uint64
	tokens  []uint32 // by tokens (pin_prefix, unpin_prefix, a session Pin) when non-nil
	badKeys int      // Warm keys that are not hashes

	// filled by check
	seqs    []uint64
	missing int
	total   int // pages named by tokens
}

// paged is an op that names pages.
type paged interface{ pagesOf() *pages }

func (p *pages) pagesOf() *pages { return p }

// target is the resolved pages as an index Target: known sequence hashes,
// which the index resolves exactly as given.
func (p *pages) target(tenant string) cache.Target {
	return cache.TargetHashes(tenant, p.seqs...)
}

func (p *pages) describe() string { return describePages(p, "") }

// span is the positions of a session's cached sequence a span verb names.
type span struct {
	session    string
	start, end int64
}

// spanned is an op that may name a session (a session Pin, Retain,
// Splice, Evict).
type spanned interface{ spanOf() *span }

func (s *span) spanOf() *span { return s }

// describePages names an op's blocks (at most four, then how many more) or
// its token count, and its lease when it has one.
func describePages(p *pages, lease string) string {
	switch {
	case p.tokens != nil:
		return strconv.Itoa(len(p.tokens)) + " tokens"
	case len(p.hashes) == 0 && lease != "":
		return "lease " + lease
	case len(p.hashes) == 0:
		return ""
	}
	// Appended into one buffer: every audited directive pays for it.
	b := make([]byte, 0, 96)
	b = append(b, "blocks "...)
	for i, h := range p.hashes {
		if i == 4 {
			b = append(b, " +"...)
			b = strconv.AppendInt(b, int64(len(p.hashes)-4), 10)
			b = append(b, " more"...)
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, h, 10)
	}
	if lease != "" {
		b = append(b, " lease "...)
		b = append(b, lease...)
	}
	return string(b)
}

func hashes(hs []directive.Hash) []uint64 {
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = uint64(h)
	}
	return out
}

// opsOf translates a turn's directives.
func opsOf(t directive.Turn) []op {
	ops := make([]op, len(t.Directives))
	for i, d := range t.Directives {
		v := verbOf(d)
		var o op
		if translate := verbOps[v]; translate != nil {
			o = translate(d)
		} else {
			o = &unsupportedOp{why: fmt.Sprintf("verb %q has no executor", v)}
		}
		b := o.base()
		b.index, b.verb, b.mode = i, string(v), modeOf(d)
		ops[i] = o
	}
	return ops
}

// verbOps is each verb's side of the executor: the op of some kind its
// directive becomes (kinds.go says what the kind does). TestEveryVerbHasAnOp
// holds it to directive.Verbs.
var verbOps = map[directive.Verb]func(d directive.Directive) op{
	directive.VerbCache: func(d directive.Directive) op {
		c := d.(directive.Cache)
		if c.Pin {
			return &pinOp{pages: pages{hashes: hashes(c.BlockHashes)}, ttl: c.TTL}
		}
		return &unpinOp{pages: pages{hashes: hashes(c.BlockHashes)}}
	},
	directive.VerbThink: func(d directive.Directive) op {
		th := d.(directive.Think)
		if th.Transient {
			return &markOp{pages: pages{hashes: hashes(th.BlockHashes)}}
		}
		return &purgeOp{pages: pages{hashes: hashes(th.BlockHashes)}}
	},
	directive.VerbPrune: func(d directive.Directive) op {
		return &pruneOp{pages: pages{hashes: []uint64{uint64(d.(directive.Prune).AfterBlockHash)}}}
	},
	directive.VerbWarm: func(d directive.Directive) op {
		w := d.(directive.Warm)
		o := &warmOp{tierName: w.TargetTier}
		for _, k := range w.BlockKeys {
			if h, ok := k.Hash(); ok {
				o.hashes = append(o.hashes, uint64(h))
			} else {
				o.badKeys++
			}
		}
		return o
	},
	directive.VerbPause: func(d directive.Directive) op {
		p := d.(directive.Pause)
		return &pauseOp{pages: pages{hashes: hashes(p.BlockHashes)}, ttl: p.TTL, lease: p.LeaseID}
	},
	directive.VerbRenewLease: func(d directive.Directive) op {
		r := d.(directive.RenewLease)
		return &renewOp{lease: r.LeaseID, ttl: r.NewTTL}
	},
	directive.VerbRevokeLease: func(d directive.Directive) op {
		return &revokeOp{lease: d.(directive.RevokeLease).LeaseID}
	},
	directive.VerbSplice: func(d directive.Directive) op {
		sp := d.(directive.Splice)
		return &spliceOp{span: span{sp.Session, sp.Start, sp.End}, repl: sp.Replacement.Tokens,
			textRepl: sp.Replacement.Text != "", dirMode: sp.Mode, recompute: recomputeOf(sp.Recompute)}
	},
	directive.VerbEvict: func(d directive.Directive) op {
		ev := d.(directive.Evict)
		return &spliceOp{span: span{ev.Session, ev.Start, ev.End}, dirMode: ev.Mode}
	},
	directive.VerbPin: func(d directive.Directive) op {
		p := d.(directive.Pin)
		return &pinOp{span: span{session: p.Session, end: p.End}, ttl: p.TTL}
	},
	directive.VerbRetain: func(d directive.Directive) op {
		r := d.(directive.Retain)
		return &retainOp{span: span{r.Session, r.Start, r.End}, priority: r.Priority, ttl: r.Duration}
	},
	directive.VerbResume: func(d directive.Directive) op {
		return &resumeOp{lease: d.(directive.Resume).LeaseID}
	},
	directive.VerbShare: func(directive.Directive) op {
		return &unsupportedOp{why: "publishing a prefix to the shared remote tier is not built yet"}
	},
}

func modeOf(d directive.Directive) string {
	if d == nil {
		return ""
	}
	return directive.ModeOf(d)
}
