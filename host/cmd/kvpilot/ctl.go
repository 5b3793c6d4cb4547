package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/ttl"
)

func init() {
	registerCommand(command{
		Name:    "ctl",
		Summary: "send directives to a host, read its stats, watch its KV events",
		Run:     runCtl,
	})
}

// ctlVerb is one `kvpilot ctl` verb: it builds a turn or a cache_control
// request from its arguments, or runs on its own (stats, watch).
type ctlVerb struct {
	synopsis string
	summary  string
	// turn builds the directive; flags are registered on fs before parsing.
	turn func(fs *flag.FlagSet) func(args []string) (directive.Directive, error)
	// cc builds a cache_control request.
	cc func(fs *flag.FlagSet) func(args []string) (directive.CacheControl, error)
	// run does the whole verb; it takes at most maxArgs arguments (1: an
	// input FILE).
	run     func(fs *flag.FlagSet) func(ctx context.Context, g *ctlGlobal, args []string) error
	maxArgs int
}

// ctlGlobal holds the flags before the verb.
type ctlGlobal struct {
	client  controlclient.Client
	tenant  string
	timeout time.Duration
	out     printer
}

var ctlVerbs = map[string]ctlVerb{
	"warm": {synopsis: "[--tier host] KEY...", summary: "fetch blocks (hashes or storage keys) into a hotter tier",
		turn: func(fs *flag.FlagSet) func([]string) (directive.Directive, error) {
			t := fs.String("tier", "host", "target tier: device, host (GPU and CPU_TIER1 accepted)")
			return func(args []string) (directive.Directive, error) {
				if len(args) == 0 {
					return nil, errors.New("needs at least one KEY")
				}
				keys := make([]directive.BlockKey, len(args))
				for i, a := range args {
					keys[i] = directive.BlockKey(a)
				}
				return directive.Warm{BlockKeys: keys, TargetTier: *t}, nil
			}
		}},
	"prune": {synopsis: "HASH", summary: "evict every descendant of a block, keeping the block",
		turn: func(*flag.FlagSet) func([]string) (directive.Directive, error) {
			return func(args []string) (directive.Directive, error) {
				hs, err := ctlHashes(args, 1)
				if err != nil {
					return nil, err
				}
				return directive.Prune{AfterBlockHash: hs[0]}, nil
			}
		}},
	"cache": {synopsis: "[--ttl D] HASH...", summary: "pin blocks and their ancestors (a Cache command with pin true)", turn: ctlPinBlocks},
	"pin": {synopsis: "[--ttl D] HASH... | --session S --end N [--ttl D]", summary: "pin blocks (as cache), or a session's prefix [0, N)",
		turn: func(fs *flag.FlagSet) func([]string) (directive.Directive, error) {
			session := fs.String("session", "", "pin this session's prefix instead of blocks")
			end := fs.Int64("end", 0, "with --session: pin tokens [0, end)")
			blocks := ctlPinBlocks(fs)
			tf := fs.Lookup("ttl")
			return func(args []string) (directive.Directive, error) {
				if *session == "" {
					return blocks(args)
				}
				if len(args) > 0 {
					return nil, errors.New("--session takes no HASH arguments")
				}
				t, err := ctlTTL(tf.Value.String())
				return directive.Pin{Session: *session, End: *end, TTL: t}, err
			}
		}},
	"unpin": {synopsis: "HASH...", summary: "unpin blocks (a Cache command with pin false)",
		turn: func(*flag.FlagSet) func([]string) (directive.Directive, error) {
			return func(args []string) (directive.Directive, error) {
				hs, err := ctlHashes(args, -1)
				return directive.Cache{BlockHashes: hs, Pin: false}, err
			}
		}},
	"think": {synopsis: "[--purge] HASH...", summary: "mark blocks transient (never backed up), or --purge them",
		turn: func(fs *flag.FlagSet) func([]string) (directive.Directive, error) {
			purge := fs.Bool("purge", false, "purge the transient blocks now instead of marking them")
			return func(args []string) (directive.Directive, error) {
				hs, err := ctlHashes(args, -1)
				return directive.Think{BlockHashes: hs, Transient: !*purge}, err
			}
		}},
	"pause": {synopsis: "--lease ID [--ttl D] HASH...", summary: "lease blocks to the pause tier: refused (capacity_exhausted) when it has no room; after ok the copies move in the background, and stats lists the lease as degraded if they cannot",
		turn: func(fs *flag.FlagSet) func([]string) (directive.Directive, error) {
			lease := fs.String("lease", "", "lease id (required)")
			t := fs.String("ttl", "", "lease TTL (30s, 5m, 1h, seconds; default: the host's maximum)")
			return func(args []string) (directive.Directive, error) {
				hs, err := ctlHashes(args, -1)
				if err != nil {
					return nil, err
				}
				d, err := ctlTTL(*t)
				return directive.Pause{BlockHashes: hs, TTL: d, LeaseID: *lease}, err
			}
		}},
	"renew": {synopsis: "LEASE TTL", summary: "set a lease's TTL from now",
		turn: func(*flag.FlagSet) func([]string) (directive.Directive, error) {
			return func(args []string) (directive.Directive, error) {
				if len(args) != 2 {
					return nil, errors.New("needs LEASE and TTL")
				}
				d, err := ttl.Parse(args[1])
				if err != nil {
					return nil, err
				}
				return directive.RenewLease{LeaseID: args[0], NewTTL: directive.TTL(d)}, nil
			}
		}},
	"revoke": {synopsis: "LEASE", summary: "end a lease and purge from every tier the blocks it alone holds; the reply says why it skipped any (locked, pinned, shared, ...)", turn: ctlLeaseVerb(func(id string) directive.Directive { return directive.RevokeLease{LeaseID: id} })},
	"resume": {synopsis: "LEASE", summary: "bring a paused lease's blocks back and end it", turn: ctlLeaseVerb(func(id string) directive.Directive { return directive.Resume{LeaseID: id} })},
	"splice": {synopsis: "--session S --start I --end J [--text T | --tokens 1,2,...] [--mode amortize|forget]", summary: "replace span [I, J) of a session",
		turn: func(fs *flag.FlagSet) func([]string) (directive.Directive, error) {
			s, start, end, mode := ctlSpanFlags(fs)
			text := fs.String("text", "", "replacement text")
			tokens := fs.String("tokens", "", "replacement token ids, comma-separated (ranges a..b allowed)")
			return func(args []string) (directive.Directive, error) {
				if err := ctlNoArgs(args); err != nil {
					return nil, err
				}
				r := directive.Replacement{Text: *text}
				if *tokens != "" {
					toks, err := parseTokens(strings.Split(*tokens, ","))
					if err != nil {
						return nil, err
					}
					r.Tokens = toks
				}
				return directive.Splice{Session: *s, Start: *start, End: *end, Replacement: r, Mode: directive.Mode(*mode)}, nil
			}
		}},
	"evict": {synopsis: "--session S --start I --end J [--mode amortize|forget]", summary: "drop span [I, J) of a session",
		turn: func(fs *flag.FlagSet) func([]string) (directive.Directive, error) {
			s, start, end, mode := ctlSpanFlags(fs)
			return func(args []string) (directive.Directive, error) {
				return directive.Evict{Session: *s, Start: *start, End: *end, Mode: directive.Mode(*mode)}, ctlNoArgs(args)
			}
		}},
	"retain": {synopsis: "--session S --start I --end J --priority P [--duration D]", summary: "soft-pin span [I, J) with a priority 0..100",
		turn: func(fs *flag.FlagSet) func([]string) (directive.Directive, error) {
			s := fs.String("session", "", "session id")
			start := fs.Int64("start", 0, "first token of the span")
			end := fs.Int64("end", 0, "token after the span")
			prio := fs.Int("priority", 50, "retention priority, 0..100")
			dur := fs.String("duration", "", "how long (default: the host's)")
			return func(args []string) (directive.Directive, error) {
				if err := ctlNoArgs(args); err != nil {
					return nil, err
				}
				d, err := ctlTTL(*dur)
				return directive.Retain{Session: *s, Start: *start, End: *end, Priority: *prio, Duration: d}, err
			}
		}},
	"share": {synopsis: "--session S --end N [--scope tenant|global]", summary: "publish a session's prefix to the shared tier",
		turn: func(fs *flag.FlagSet) func([]string) (directive.Directive, error) {
			s := fs.String("session", "", "session id")
			end := fs.Int64("end", 0, "share tokens [0, end)")
			scope := fs.String("scope", "", "tenant (default) or global")
			return func(args []string) (directive.Directive, error) {
				return directive.Share{Session: *s, End: *end, Scope: directive.Scope(*scope)}, ctlNoArgs(args)
			}
		}},
	"pin-blocks":        {synopsis: "[--ttl D] HASH...", summary: "cache_control pin_blocks", cc: ctlCCBlocks(directive.ActionPinBlocks)},
	"unpin-blocks":      {synopsis: "HASH...", summary: "cache_control unpin_blocks", cc: ctlCCBlocks(directive.ActionUnpinBlocks)},
	"evict-descendants": {synopsis: "HASH...", summary: "cache_control evict_descendants", cc: ctlCCBlocks(directive.ActionEvictDescendants)},
	"pin-prefix":        {synopsis: "[--ttl D] TOKENS...", summary: "cache_control pin_prefix (tokens, ranges a..b)", cc: ctlCCTokens(directive.ActionPinPrefix)},
	"unpin-prefix":      {synopsis: "TOKENS...", summary: "cache_control unpin_prefix", cc: ctlCCTokens(directive.ActionUnpinPrefix)},
	"apply": {synopsis: "[FILE|-]", summary: "send a turn as JSON (one command, an array, or {\"directives\":[...]})", maxArgs: 1,
		run: func(*flag.FlagSet) func(context.Context, *ctlGlobal, []string) error {
			return func(ctx context.Context, g *ctlGlobal, args []string) error {
				data, err := ctlInput(args)
				if err != nil {
					return err
				}
				t, err := directive.DecodeTurn(data, directive.Limits{})
				if err != nil {
					return err
				}
				if g.tenant != "" {
					t.Tenant = g.tenant
				}
				return g.sendTurn(ctx, t)
			}
		}},
	"cache-control": {synopsis: "[FILE|-]", summary: "send a cache_control request as JSON", maxArgs: 1,
		run: func(*flag.FlagSet) func(context.Context, *ctlGlobal, []string) error {
			return func(ctx context.Context, g *ctlGlobal, args []string) error {
				data, err := ctlInput(args)
				if err != nil {
					return err
				}
				c, err := directive.DecodeCacheControl(data, directive.Limits{})
				if err != nil {
					return err
				}
				return g.sendCC(ctx, c)
			}
		}},
	"stats": {synopsis: "[--tenant T]", summary: "per tier: pages, bytes, pinned and leased pages, host-wide or of one tenant (socket only)",
		run: func(fs *flag.FlagSet) func(context.Context, *ctlGlobal, []string) error {
			tenant := fs.String("tenant", "", "only this tenant's pages (default: ctl's --tenant; none: host-wide, or the one tenant control.tenants binds this uid to)")
			return func(ctx context.Context, g *ctlGlobal, _ []string) error {
				ctx, cancel := context.WithTimeout(ctx, g.timeout)
				defer cancel()
				if *tenant == "" {
					*tenant = g.tenant
				}
				s, err := g.client.TenantStats(ctx, *tenant)
				if err != nil {
					return g.out.failed(err)
				}
				return g.out.stats(s)
			}
		}},
	"watch": {synopsis: "[--tier T]... [--count N]", summary: "print KV events as they are published",
		run: func(fs *flag.FlagSet) func(context.Context, *ctlGlobal, []string) error {
			var tiers ctlList
			fs.Var(&tiers, "tier", "only this tier (repeatable)")
			count := fs.Int("count", 0, "stop after N events (0: until interrupted)")
			return func(ctx context.Context, g *ctlGlobal, _ []string) error {
				n := 0
				err := g.client.Watch(ctx, controlclient.WatchOptions{Tiers: tiers, Tenant: g.tenant}, func(ev controlclient.Event) error {
					if err := g.out.event(ev); err != nil {
						return err
					}
					if n++; *count > 0 && n >= *count {
						return controlclient.ErrStop
					}
					return nil
				})
				if err == nil || errors.Is(err, context.Canceled) {
					return err
				}
				return g.out.failed(err)
			}
		}},
}

func runCtl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ctl", "[flags] VERB [verb flags] [args]",
		"Sends a directive to a kvpilot host over its Control socket (the default) or\n"+
			"over NATS (--nats), and prints the host's answer per directive. Hashes are\n"+
			"sequence hashes (or local hashes walked from the root), as unsigned or signed\n"+
			"decimal or 0x-hex. TTLs are 30s, 5m, 1h or bare seconds.\n\n"+
			"Every reply starts with \"ok:\", \"refused: <code>: ...\" (the next line is the\n"+
			"hint; exit status 1) or \"accepted:\" (a JetStream command stream stored it and\n"+
			"the host's result did not come within --timeout), with detail on indented\n"+
			"lines. --json prints one object per reply (per event for watch):\n"+
			"{\"verb\", \"status\", \"error\": {code, message, hint, ...}, \"reply\"}.\n\n"+
			"Verbs:\n"+ctlVerbList(), stderr)
	cfgPath := fs.String("config", os.Getenv(config.EnvConfigFile), "host config file, for the default socket and subject")
	socket := fs.String("socket", "", "Control socket path (default: control.socket from the config)")
	natsURL := fs.String("nats", "", "send over NATS at this URL instead of the socket")
	subject := fs.String("subject", "", "NATS command subject (default: the config's worker subject)")
	worker := fs.String("worker", "", "with --nats: send to kv-control-<worker> (\"broadcast\" for all)")
	jet := fs.Bool("jetstream", false, "with --nats: give the command a Nats-Msg-Id, so the host's command stream stores it once however often it is sent")
	source := fs.String("source", "kvpilot-ctl", "name for the host's audit log")
	tenant := fs.String("tenant", "", "tenant whose blocks the directive acts on")
	asJSON := fs.Bool("json", false, "print the host's answer as JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for an answer")
	if err := parseLeadingFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	name := fs.Arg(0)
	v, ok := ctlVerbs[name]
	if !ok {
		fmt.Fprintf(stderr, "kvpilot ctl: unknown verb %q\n\nVerbs:\n%s", name, ctlVerbList())
		return errUsage
	}
	vfs := newFlagSet("ctl "+name, v.synopsis, v.summary+".", stderr)
	var build func([]string) (directive.Directive, error)
	var buildCC func([]string) (directive.CacheControl, error)
	var run func(context.Context, *ctlGlobal, []string) error
	switch {
	case v.turn != nil:
		build = v.turn(vfs)
	case v.cc != nil:
		buildCC = v.cc(vfs)
	default:
		run = v.run(vfs)
	}
	// ctl's own flags work after the verb too (`ctl stats --json`).
	fs.VisitAll(func(f *flag.Flag) {
		if vfs.Lookup(f.Name) == nil {
			vfs.Var(f.Value, f.Name, f.Usage)
		}
	})
	if err := parseFlags(vfs, fs.Args()[1:]); err != nil {
		return err
	}
	// What the arguments ask for is settled before any host is asked: a
	// mistake in them is a usage error (status 2), never a refusal.
	var d directive.Directive
	var cc directive.CacheControl
	var err error
	switch {
	case build != nil:
		d, err = build(vfs.Args())
	case buildCC != nil:
		cc, err = buildCC(vfs.Args())
	case v.maxArgs == 0:
		err = ctlNoArgs(vfs.Args())
	case vfs.NArg() > v.maxArgs:
		err = fmt.Errorf("takes one FILE, or - or nothing for stdin, got %q", vfs.Args())
	}
	if err != nil {
		return usageError(vfs, err)
	}

	cfg, err := config.Load(*cfgPath, os.Environ())
	if err != nil {
		return err
	}
	g := &ctlGlobal{tenant: *tenant, timeout: *timeout, out: printer{w: stdout, json: *asJSON, verb: name}}
	if *natsURL != "" {
		subj := *subject
		switch {
		case subj != "":
		case *worker == "broadcast":
			subj = cfg.NATS.BroadcastSubject
		case *worker != "":
			subj = strings.ReplaceAll(cfg.NATS.WorkerSubject, "{worker_id}", *worker)
		default:
			subj = cfg.WorkerSubject()
		}
		g.client, err = controlclient.ConnectNATS(*natsURL, controlclient.NATSOptions{
			Subject: subj, Source: *source, JetStream: *jet,
			EventsSubject: cfg.EventsSubject(),
		})
	} else {
		path := *socket
		if path == "" {
			path = cfg.ControlSocket()
		}
		g.client, err = controlclient.DialUnix(path, controlclient.UnixOptions{Source: *source})
	}
	if err != nil {
		return err
	}
	defer g.client.Close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()

	switch {
	case build != nil:
		return g.sendTurn(ctx, directive.Turn{Tenant: g.tenant, Directives: []directive.Directive{d}})
	case buildCC != nil:
		return g.sendCC(ctx, cc)
	}
	err = run(ctx, g, vfs.Args())
	if errors.Is(err, context.Canceled) {
		return nil // interrupted watch
	}
	return err
}

func (g *ctlGlobal) sendTurn(ctx context.Context, t directive.Turn) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	r, err := g.client.Apply(ctx, t)
	if err != nil {
		return g.out.failed(err)
	}
	return g.out.turn(r)
}

func (g *ctlGlobal) sendCC(ctx context.Context, c directive.CacheControl) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	r, err := g.client.CacheControl(ctx, c, g.tenant)
	if err != nil {
		return g.out.failed(err)
	}
	return g.out.cacheControl(c, r)
}

func ctlPinBlocks(fs *flag.FlagSet) func([]string) (directive.Directive, error) {
	t := fs.String("ttl", "", "pin TTL (30s, 5m, 1h, seconds; default: the host's)")
	return func(args []string) (directive.Directive, error) {
		hs, err := ctlHashes(args, -1)
		if err != nil {
			return nil, err
		}
		d, err := ctlTTL(*t)
		return directive.Cache{BlockHashes: hs, Pin: true, TTL: d}, err
	}
}

func ctlLeaseVerb(mk func(string) directive.Directive) func(*flag.FlagSet) func([]string) (directive.Directive, error) {
	return func(*flag.FlagSet) func([]string) (directive.Directive, error) {
		return func(args []string) (directive.Directive, error) {
			if len(args) != 1 {
				return nil, errors.New("needs exactly one LEASE")
			}
			return mk(args[0]), nil
		}
	}
}

func ctlSpanFlags(fs *flag.FlagSet) (session *string, start, end *int64, mode *string) {
	session = fs.String("session", "", "session id")
	start = fs.Int64("start", 0, "first token of the span")
	end = fs.Int64("end", 0, "token after the span")
	mode = fs.String("mode", "", "amortize or forget (default: the host's)")
	return
}

func ctlCCBlocks(a directive.Action) func(*flag.FlagSet) func([]string) (directive.CacheControl, error) {
	return func(fs *flag.FlagSet) func([]string) (directive.CacheControl, error) {
		var t *string
		if a == directive.ActionPinBlocks {
			t = fs.String("ttl", "", "pin TTL (default: the host's)")
		}
		return func(args []string) (directive.CacheControl, error) {
			hs, err := ctlHashes(args, -1)
			if err != nil {
				return directive.CacheControl{}, err
			}
			c := directive.CacheControl{Action: a, BlockHashes: hs}
			if t != nil {
				c.TTL, err = ctlTTL(*t)
			}
			return c, err
		}
	}
}

func ctlCCTokens(a directive.Action) func(*flag.FlagSet) func([]string) (directive.CacheControl, error) {
	return func(fs *flag.FlagSet) func([]string) (directive.CacheControl, error) {
		var t *string
		if a == directive.ActionPinPrefix {
			t = fs.String("ttl", "", "pin TTL (default: the host's)")
		}
		return func(args []string) (directive.CacheControl, error) {
			toks, err := parseTokens(args)
			if err != nil {
				return directive.CacheControl{}, err
			}
			c := directive.CacheControl{Action: a, TokenIDs: toks}
			if t != nil {
				c.TTL, err = ctlTTL(*t)
			}
			return c, err
		}
	}
}

// ctlHashes parses block hashes; want is the exact count, or -1 for "one
// or more".
func ctlHashes(args []string, want int) ([]directive.Hash, error) {
	if want >= 0 && len(args) != want {
		return nil, fmt.Errorf("want %d HASH argument(s), got %d", want, len(args))
	}
	if len(args) == 0 {
		return nil, errors.New("want at least one HASH")
	}
	hs := make([]directive.Hash, len(args))
	for i, a := range args {
		h, err := directive.ParseHash(a)
		if err != nil {
			return nil, err
		}
		hs[i] = h
	}
	return hs, nil
}

func ctlTTL(s string) (*directive.TTL, error) {
	if s == "" {
		return nil, nil
	}
	d, err := ttl.Parse(s)
	if err != nil {
		return nil, err
	}
	return directive.TTLOf(d), nil
}

// ctlInput reads the JSON of apply and cache-control: FILE, or stdin for
// "-" or no argument.
func ctlInput(args []string) ([]byte, error) {
	if len(args) == 0 || args[0] == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, directive.DefaultMaxPayload+1))
	}
	return os.ReadFile(args[0])
}

// ctlNoArgs refuses positional arguments to a verb that takes flags only.
func ctlNoArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("takes no arguments, got %q", args)
	}
	return nil
}

func ctlVerbList() string {
	names := make([]string, 0, len(ctlVerbs))
	for n := range ctlVerbs {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "  %-18s %s\n", n, ctlVerbs[n].summary)
	}
	return b.String()
}

// ctlList is a repeatable string flag.
type ctlList []string

func (l *ctlList) String() string     { return strings.Join(*l, ",") }
func (l *ctlList) Set(s string) error { *l = append(*l, s); return nil }
