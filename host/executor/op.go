package executor

import (
	"fmt"
	"strconv"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// opKind is what an op does to the index. Directives and cache_control
// actions both become ops, so one engine checks, applies and undoes them;
// each kind's steps are defined in kinds.go.
type opKind uint8

const (
	opUnsupported opKind = iota // refused with not_supported_yet
	opPin                       // reversible
	opUnpin                     // reversible
	opMark                      // reversible: MarkTransient(on)
	opWarm                      // commit-only from here on
	opPause
	opRenew
	opRevoke
	opPrune
	opPurge
	opSplice // Splice, Evict: planned after the reversible step, applied first
	opRetain
	opResume
)

type op struct {
	index int
	verb  string // directive verb or cache_control action
	mode  string
	kind  opKind

	// inputs
	hashes   []uint64
	tokens   []uint32 // by tokens (pin_prefix, unpin_prefix) when non-nil
	ttl      *directive.TTL
	lease    string
	tierName string
	badKeys  int  // Warm keys that are not hashes
	on       bool // opMark
	why      string

	// span verbs
	session    string
	start, end int64
	repl       []uint32
	textRepl   bool
	dirMode    directive.Mode
	priority   int
	spliced    bool // a purge done (in part) by splices

	// filled by check
	seqs    []uint64
	missing int
	total   int // pages named by tokens
	ttlD    time.Duration
	to      tier.Tier

	// outcome
	eff directive.Effect
}

func hashes(hs []directive.Hash) []uint64 {
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = uint64(h)
	}
	return out
}

// opsOf translates a turn's directives.
func opsOf(t directive.Turn) []*op {
	ops := make([]*op, len(t.Directives))
	for i, d := range t.Directives {
		o := &op{index: i, verb: string(verbOf(d)), mode: modeOf(d)}
		if translate := verbOps[verbOf(d)]; translate != nil {
			translate(o, d)
		} else {
			o.why = fmt.Sprintf("verb %q has no executor", o.verb)
		}
		ops[i] = o
	}
	return ops
}

// verbOps is each verb's side of the executor: how its directive becomes
// an op of a kind (kinds.go says what the kind does). TestEveryVerbHasAnOp
// holds it to directive.Verbs.
var verbOps = map[directive.Verb]func(o *op, d directive.Directive){
	directive.VerbCache: func(o *op, d directive.Directive) {
		c := d.(directive.Cache)
		o.kind, o.hashes, o.ttl = opUnpin, hashes(c.BlockHashes), c.TTL
		if c.Pin {
			o.kind = opPin
		}
	},
	directive.VerbThink: func(o *op, d directive.Directive) {
		th := d.(directive.Think)
		o.kind, o.hashes, o.on = opPurge, hashes(th.BlockHashes), true
		if th.Transient {
			o.kind = opMark
		}
	},
	directive.VerbPrune: func(o *op, d directive.Directive) {
		o.kind, o.hashes = opPrune, []uint64{uint64(d.(directive.Prune).AfterBlockHash)}
	},
	directive.VerbWarm: func(o *op, d directive.Directive) {
		w := d.(directive.Warm)
		o.kind, o.tierName = opWarm, w.TargetTier
		for _, k := range w.BlockKeys {
			if h, ok := k.Hash(); ok {
				o.hashes = append(o.hashes, uint64(h))
			} else {
				o.badKeys++
			}
		}
	},
	directive.VerbPause: func(o *op, d directive.Directive) {
		p := d.(directive.Pause)
		o.kind, o.hashes, o.ttl, o.lease = opPause, hashes(p.BlockHashes), p.TTL, p.LeaseID
	},
	directive.VerbRenewLease: func(o *op, d directive.Directive) {
		r := d.(directive.RenewLease)
		o.kind, o.lease, o.ttl = opRenew, r.LeaseID, &r.NewTTL
	},
	directive.VerbRevokeLease: func(o *op, d directive.Directive) {
		o.kind, o.lease = opRevoke, d.(directive.RevokeLease).LeaseID
	},
	directive.VerbSplice: func(o *op, d directive.Directive) {
		sp := d.(directive.Splice)
		o.kind, o.session, o.start, o.end = opSplice, sp.Session, sp.Start, sp.End
		o.repl, o.textRepl, o.dirMode = sp.Replacement.Tokens, sp.Replacement.Text != "", sp.Mode
	},
	directive.VerbEvict: func(o *op, d directive.Directive) {
		ev := d.(directive.Evict)
		o.kind, o.session, o.start, o.end, o.dirMode = opSplice, ev.Session, ev.Start, ev.End, ev.Mode
	},
	directive.VerbPin: func(o *op, d directive.Directive) {
		p := d.(directive.Pin)
		o.kind, o.session, o.end, o.ttl = opPin, p.Session, p.End, p.TTL
	},
	directive.VerbRetain: func(o *op, d directive.Directive) {
		r := d.(directive.Retain)
		o.kind, o.session, o.start, o.end, o.priority, o.ttl = opRetain, r.Session, r.Start, r.End, r.Priority, r.Duration
	},
	directive.VerbResume: func(o *op, d directive.Directive) {
		o.kind, o.lease = opResume, d.(directive.Resume).LeaseID
	},
	directive.VerbShare: func(o *op, _ directive.Directive) {
		o.why = "publishing a prefix to the shared remote tier is not built yet"
	},
}

func modeOf(d directive.Directive) string {
	if d == nil {
		return ""
	}
	return directive.ModeOf(d)
}

// target is the op's resolved pages as an index Target: known sequence
// hashes, which the index resolves exactly as given.
func (o *op) target(tenant string) cache.Target {
	return cache.TargetHashes(tenant, o.seqs...)
}

// describe is the audit log's short target description.
func (o *op) describe() string {
	switch {
	case o.lease != "" && len(o.hashes) == 0:
		return "lease " + o.lease
	case o.tokens != nil:
		return strconv.Itoa(len(o.tokens)) + " tokens"
	case len(o.hashes) > 0:
		// Appended into one buffer: every audited directive pays for it.
		b := make([]byte, 0, 96)
		b = append(b, "blocks "...)
		for i, h := range o.hashes {
			if i == 4 {
				b = append(b, " +"...)
				b = strconv.AppendInt(b, int64(len(o.hashes)-4), 10)
				b = append(b, " more"...)
				break
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, h, 10)
		}
		if o.lease != "" {
			b = append(b, " lease "...)
			b = append(b, o.lease...)
		}
		return string(b)
	}
	return ""
}

func (o *op) unsupported() *errcode.Error {
	return errcode.New(errcode.NotSupportedYet, "%s: %s", o.verb, o.why)
}
