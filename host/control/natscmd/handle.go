package natscmd

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

const (
	headerSource = controlclient.HeaderSource
	headerTenant = controlclient.HeaderTenant
	headerReply  = controlclient.HeaderReply
	headerMsgID  = controlclient.HeaderMsgID
)

// incoming is one command message, whichever way it arrived.
type incoming struct {
	data   []byte
	header nats.Header
	// inbox is the client's reply subject, for naming the source.
	inbox     string
	broadcast bool
	// subject is the one the message came on (see arrived). bound: tenant
	// subjects are on, so the command acts for subjectTenant ("" on a bare
	// subject) and for no tenant it claims otherwise; badSubject, when
	// set, refuses it: the subject names no usable tenant.
	subject       string
	bound         bool
	subjectTenant string
	badSubject    *errcode.Error
	// msgID is the JetStream Nats-Msg-Id; it becomes the turn id when the
	// turn names none, so the audit log ties the two together.
	msgID string
}

// handle applies one command and returns the JSON answer, or nil when the
// command is not for this worker.
func (s *Server) handle(ctx context.Context, in incoming) []byte {
	tenant := in.header.Get(headerTenant)
	if len(tenant) > directive.MaxNameLen {
		// The executor refuses over-long tenants; keep the header's
		// length out of logs and labels before it gets there.
		tenant = tenant[:directive.MaxNameLen+1]
	}
	// A turn is decoded before the cache_control probe is run, and the
	// probe only when the decode fails: a turn DecodeTurn accepts has no
	// key but a turn's, so the probe would have said no to it, and the
	// common case is spared a second parse.
	t, derr := directive.DecodeTurn(in.data, s.limits)
	if derr != nil && isCacheControl(in.data, s.limits) {
		return s.handleCacheControl(ctx, in, tenant)
	}
	return s.handleTurn(ctx, in, tenant, t, derr)
}

func (s *Server) handleTurn(ctx context.Context, in incoming, tenant string, t directive.Turn, derr error) []byte {
	declared := ""
	if derr == nil {
		declared = t.Source
	}
	source := s.sourceOf(in, declared)
	// The header's tenant comes first; the envelope's only decoded.
	tenant, terr := s.bind(in, tenant, t.Tenant)
	var reply directive.TurnReply
	if e := s.cfg.Ingress.Admit(ingress.NATS, source); e != nil {
		t.Source = source
		reply = s.cfg.Ingress.RefuseTurn(t, e, false)
	} else if terr != nil {
		s.cfg.Log.Warn("NATS command refused", "source", source, "code", terr.Code, "error", terr.Error())
		t.Source, t.Tenant = source, in.subjectTenant
		reply = s.cfg.Ingress.RefuseTurn(t, terr, true)
	} else if derr != nil {
		// The executor decodes again to answer and audit the refusal.
		reply = s.cfg.Ingress.ApplyJSON(ctx, source, tenant, in.data)
	} else {
		t.Source, t.Tenant = source, tenant
		if t.ID == "" {
			t.ID = in.msgID
		}
		reply = s.cfg.Ingress.Apply(ctx, t)
	}
	b, err := reply.AppendJSON(make([]byte, 0, 256))
	if err != nil {
		return encode(reply) // answers with the encoding error
	}
	return b
}

func (s *Server) handleCacheControl(ctx context.Context, in incoming, tenant string) []byte {
	c, derr := directive.DecodeCacheControl(in.data, s.limits)
	if derr == nil && in.broadcast && c.WorkerID != "" && c.WorkerID != s.worker {
		return nil
	}
	source := s.sourceOf(in, "")
	// cache_control has no tenant field: the header is the only claim.
	tenant, terr := s.bind(in, tenant)
	var reply directive.CacheControlReply
	if e := s.cfg.Ingress.Admit(ingress.NATS, source); e != nil {
		reply = s.cfg.Ingress.RefuseCacheControl(source, tenant, c.Action, e, false)
	} else if terr != nil {
		s.cfg.Log.Warn("NATS command refused", "source", source, "code", terr.Code, "error", terr.Error())
		reply = s.cfg.Ingress.RefuseCacheControl(source, in.subjectTenant, c.Action, terr, true)
	} else if derr != nil {
		reply = s.cfg.Ingress.CacheControlJSON(ctx, source, tenant, c.Action, in.data)
	} else {
		reply = s.cfg.Ingress.CacheControl(ctx, source, tenant, c)
	}
	return encode(reply)
}

// sourceOf names the sender (see the package doc for the order).
func (s *Server) sourceOf(in incoming, declared string) string {
	name := "anonymous"
	switch inbox := in.inbox; {
	case validName(in.header.Get(headerSource)):
		name = in.header.Get(headerSource)
	case validName(declared):
		name = declared
	default:
		if inbox == "" {
			inbox = in.header.Get(headerReply)
		}
		if i := strings.LastIndexByte(inbox, '.'); i > 0 {
			inbox = inbox[:i]
		}
		if validName(inbox) {
			name = inbox
		}
	}
	prefix := "nats:"
	switch {
	case in.badSubject != nil:
		prefix = "nats[?]:"
	case in.subjectTenant != "":
		prefix = "nats[" + in.subjectTenant + "]:"
	}
	src := prefix + name
	if len(src) > directive.MaxNameLen {
		// The executor refuses longer sources. Only a tenant name near
		// MaxNameLen gets here; cut on a character boundary.
		cut := directive.MaxNameLen
		for cut > 0 && !utf8.RuneStart(src[cut]) {
			cut--
		}
		src = src[:cut]
	}
	return src
}

func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// isCacheControl tells the router's cache_control JSON (keyed by "action")
// from a turn (keyed by "type", or "directives", or an array). An oversized
// payload is not parsed: a cheap look at its start decides which refusal
// shape to answer in.
func isCacheControl(data []byte, l directive.Limits) bool {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return false
	}
	max := l.MaxPayload
	if max <= 0 {
		max = directive.DefaultMaxPayload
	}
	if len(data) > max {
		head := trimmed[:min(len(trimmed), 512)]
		return bytes.Contains(head, []byte(`"action"`)) && !bytes.Contains(head, []byte(`"type"`))
	}
	var probe struct {
		Action json.RawMessage `json:"action"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return false // the turn decoder explains what is wrong
	}
	return probe.Action != nil
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Replies are plain structs of strings and numbers; this is a bug.
		b, _ = json.Marshal(directive.TurnReply{Status: directive.StatusError, Error: errcode.Wrap(errcode.Internal, err, "encode reply")})
	}
	return b
}
