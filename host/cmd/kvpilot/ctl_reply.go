package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Every ctl verb answers in one shape. For a person: a first line
// "<status>: <summary>", where status is ok, refused or accepted, then
// indented lines of detail; a refusal's detail starts with the registry's
// hint. With --json: one object per reply (per event for watch), the
// envelope below, with the host's own answer under "reply".

// Statuses of a reply.
const (
	replyOK       = "ok"
	replyRefused  = "refused"
	replyAccepted = "accepted"
)

// ctlReply is the --json envelope of every verb's reply.
type ctlReply struct {
	Verb   string         `json:"verb"`
	Status string         `json:"status"`
	Error  *errcode.Error `json:"error,omitempty"`
	// Stream and Seq say where a JetStream command stream stored a command
	// whose result did not come within --timeout (status accepted).
	Stream string `json:"stream,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	Reply  any    `json:"reply,omitempty"`
}

// errRefused makes ctl exit 1 after printing a refusal.
var errRefused = errors.New("refused by the host")

// printer writes replies for one ctl run, as text or as JSON.
type printer struct {
	w    io.Writer
	json bool
	verb string
}

func (p printer) envelope(r ctlReply) error {
	r.Verb = p.verb
	return json.NewEncoder(p.w).Encode(r)
}

// refused prints e as a refusal and returns errRefused.
func (p printer) refused(e *errcode.Error, reply any) error {
	if p.json {
		if err := p.envelope(ctlReply{Status: replyRefused, Error: e, Reply: reply}); err != nil {
			return err
		}
		return errRefused
	}
	fmt.Fprintf(p.w, "%s: %v\n", replyRefused, e)
	if h := e.Entry().Hint; h != "" {
		fmt.Fprintf(p.w, "  hint: %s\n", h)
	}
	return errRefused
}

// failed prints an error the host answered with (a registry error) as a
// refusal; any other error is returned for the caller to report.
func (p printer) failed(err error) error {
	var q *controlclient.QueuedError
	if errors.As(err, &q) {
		return p.accepted(q)
	}
	if e, ok := errcode.As(err); ok {
		return p.refused(e, nil)
	}
	return err
}

// accepted reports a command the host's JetStream command stream stored
// and whose result did not come within --timeout: the host applies (or
// refuses) it when it takes it from the stream. ctl exits 0; sending it
// again would apply it twice.
func (p printer) accepted(q *controlclient.QueuedError) error {
	if p.json {
		return p.envelope(ctlReply{Status: replyAccepted, Stream: q.Stream, Seq: q.Seq})
	}
	fmt.Fprintf(p.w, "%s: stored in JetStream stream %s (seq %d); the host's result did not come within --timeout\n"+
		"  hint: the host applies it from the stream; do not send it again (see the host's audit log for the result)\n",
		replyAccepted, q.Stream, q.Seq)
	return nil
}

func (p printer) turn(r directive.TurnReply) error {
	if !r.OK() {
		e := r.Error
		if e == nil {
			e = errcode.New(errcode.Internal, "the host refused the turn without an error")
		}
		if p.json {
			if err := p.envelope(ctlReply{Status: replyRefused, Error: e, Reply: r}); err != nil {
				return err
			}
			return errRefused
		}
		_ = p.refused(e, nil)
		describeResults(p.w, r)
		return errRefused
	}
	if p.json {
		return p.envelope(ctlReply{Status: replyOK, Reply: r})
	}
	fmt.Fprintf(p.w, "%s: %s applied\n", replyOK, plural(len(r.Results), "directive"))
	describeResults(p.w, r)
	if r.Warning != "" {
		fmt.Fprintf(p.w, "  warning: %s\n", r.Warning)
	}
	return nil
}

func (p printer) cacheControl(c directive.CacheControl, r directive.CacheControlReply) error {
	if r.Status != directive.StatusOK {
		code := r.Code
		if code == "" {
			code = errcode.Internal
		}
		// The host's message already starts with the code and its words.
		ent, _ := errcode.Lookup(code)
		detail := strings.TrimPrefix(r.Message, string(code)+": "+ent.Message+": ")
		return p.refused(errcode.New(code, "%s", detail), r)
	}
	if p.json {
		return p.envelope(ctlReply{Status: replyOK, Reply: r})
	}
	fmt.Fprintf(p.w, "%s: %s applied\n  0 %s: %s (%s %d)\n", replyOK, plural(1, "directive"), c.Action, r.Message, c.Action.CountField(), r.Count())
	return nil
}

func (p printer) stats(s controlclient.Stats) error {
	if p.json {
		return p.envelope(ctlReply{Status: replyOK, Reply: s})
	}
	fmt.Fprintf(p.w, "%s: worker %s, %d tokens per page, %d leases, %d pins, %d sessions\n", replyOK, s.WorkerID, s.PageSizeTokens, s.Leases, s.Pins, s.Sessions)
	if s.Tenant != "" {
		fmt.Fprintf(p.w, "  tenant %q: %d pages, %d pinned, pin quota %d (0: none); tiers count its pages only\n",
			s.Tenant, s.TenantPages, s.TenantPinnedPages, s.TenantPinQuota)
	}
	if s.RestorePending {
		fmt.Fprintln(p.w, "  pins and leases saved before the restart: restored when an engine registers (the pools open then)")
	}
	for _, l := range s.DegradedLeases {
		fmt.Fprintf(p.w, "  lease %s degraded (its pages stay evictable until it settles): %s\n", l.LeaseID, l.Reason)
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  tier\tpages\tbytes\tpinned\tpinned bytes\tleased\tcapacity bytes\t\n")
	for _, t := range s.Tiers {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", t.Tier, t.Pages, t.Bytes, t.PinnedPages, t.PinnedBytes, t.LeasedPages, t.CapacityBytes)
	}
	return tw.Flush()
}

// event prints one watched event: a line, or an envelope per event.
func (p printer) event(ev controlclient.Event) error {
	if p.json {
		return p.envelope(ctlReply{Status: replyOK, Reply: ev})
	}
	_, err := fmt.Fprintln(p.w, describeEvent(ev))
	return err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// describeResults writes a line per applied directive, and one per
// refused directive whose code differs from the turn's.
func describeResults(w io.Writer, r directive.TurnReply) {
	for _, res := range r.Results {
		if res.OK() {
			fmt.Fprintf(w, "  %d %s: %s\n", res.Index, res.Verb, describeEffect(res.Effect))
		} else if res.Error != nil && r.Error != nil && res.Error.Code != r.Error.Code {
			fmt.Fprintf(w, "  %d %s: %s\n", res.Index, res.Verb, res.Error.Code)
		}
	}
}

func describeEffect(e directive.Effect) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d blocks", e.Blocks)
	if e.Skipped > 0 {
		fmt.Fprintf(&b, ", %d skipped", e.Skipped)
		if len(e.Skips) > 0 {
			fmt.Fprintf(&b, " (%s)", describeSkips(e.Skips))
		}
	}
	if e.Missing > 0 {
		fmt.Fprintf(&b, ", %d missing", e.Missing)
	}
	if e.Tokens > 0 {
		fmt.Fprintf(&b, ", %d tokens", e.Tokens)
	}
	if e.LeaseID != "" {
		fmt.Fprintf(&b, ", lease %s", e.LeaseID)
	}
	if e.TTL > 0 {
		fmt.Fprintf(&b, ", ttl %v", e.TTL)
	}
	return b.String()
}

// skipWords says each skip reason in an operator's words.
var skipWords = map[directive.SkipReason]string{
	directive.SkipLocked:       "locked by a running request",
	directive.SkipPinned:       "pinned",
	directive.SkipLeased:       "held by another lease",
	directive.SkipShared:       "shared with another session",
	directive.SkipAncestor:     "above a skipped block",
	directive.SkipAlready:      "already there",
	directive.SkipTransient:    "transient, never copied colder",
	directive.SkipNotPinned:    "not pinned",
	directive.SkipNotTransient: "not transient",
	directive.SkipInterior:     "interior, left to a splice",
}

func describeSkips(skips []directive.Skip) string {
	parts := make([]string, 0, len(skips))
	for _, sk := range skips {
		w := skipWords[sk.Reason]
		if w == "" {
			w = string(sk.Reason)
		}
		parts = append(parts, fmt.Sprintf("%d %s", sk.Blocks, w))
	}
	return strings.Join(parts, ", ")
}

func describeEvent(ev controlclient.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d worker %d %s %s", ev.Event.EventID, ev.WorkerID, ev.StorageTier, ev.Event.Data.Kind())
	switch d := ev.Event.Data; {
	case d.Stored != nil:
		if d.Stored.ParentHash != nil {
			fmt.Fprintf(&b, " parent %d", *d.Stored.ParentHash)
		}
		for _, bl := range d.Stored.Blocks {
			fmt.Fprintf(&b, " %d", bl.BlockHash)
		}
	case d.Removed != nil:
		for _, h := range d.Removed.BlockHashes {
			fmt.Fprintf(&b, " %d", h)
		}
	}
	return b.String()
}
