package natscmd

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Tenant subjects (nats.tenant_subjects). A payload's tenant is whatever
// its sender wrote, and NATS does not authenticate payloads; who may
// publish on which subject, though, the NATS server decides per user. So
// in this mode the subject is the tenant: <worker>.<tenant> and
// <broadcast>.<tenant> act for that tenant, the bare subjects for the
// default tenant "" only, and a payload (or Kvpilot-Tenant header) naming
// another tenant is refused with tenant_mismatch instead of being trusted.
// Giving NATS user alice publish rights on kv-control-*.alice alone then
// confines her to her tenant's cache.

// TenantSubject is the subject on which a command acts for tenant, in
// tenant-subject mode: base (a worker or broadcast subject) and the
// tenant as its last token. The host's embedded server grants NATS users
// these subjects (nats.users); "*" for tenant gives the wildcard.
func TenantSubject(base, tenant string) string { return base + "." + tenant }

// arrived fills in what the subject a message came on says about it:
// whether it is a broadcast, and in tenant-subject mode which tenant it
// acts for.
func (s *Server) arrived(subject string, in *incoming) {
	in.subject = subject
	in.broadcast = subject == s.cfg.BroadcastSubject
	if !s.cfg.TenantSubjects {
		return
	}
	in.bound = true
	if subject == s.cfg.WorkerSubject || subject == s.cfg.BroadcastSubject {
		return // the default tenant
	}
	rest, ok := strings.CutPrefix(subject, s.cfg.BroadcastSubject+".")
	if ok {
		in.broadcast = true
	} else if rest, ok = strings.CutPrefix(subject, s.cfg.WorkerSubject+"."); !ok {
		// Not one of ours: the subscriptions and the consumer's filter
		// make this unreachable, but a command must never fall back to
		// acting for some tenant by default.
		in.badSubject = errcode.New(errcode.BadRequest, "subject %s is not %s.<tenant> nor %s.<tenant>",
			short(subject), s.cfg.WorkerSubject, s.cfg.BroadcastSubject)
		return
	}
	if !validTenantToken(rest) {
		in.badSubject = errcode.New(errcode.BadRequest, "subject %s: tenant token %s is not a tenant name (at most %d printable characters, not a wildcard)",
			short(subject), short(rest), directive.MaxNameLen)
		return
	}
	in.subjectTenant = rest
}

func validTenantToken(t string) bool {
	if t == "" || t == "*" || t == ">" || len(t) > directive.MaxNameLen || !utf8.ValidString(t) || strings.Contains(t, ".") {
		return false
	}
	for _, r := range t {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// bind returns the tenant a command acts for. Without tenant subjects it
// is the first tenant the sender claims (the Kvpilot-Tenant header, then
// the payload's); with them it is the subject's tenant, and a claim of any
// other tenant is refused.
func (s *Server) bind(in incoming, claims ...string) (string, *errcode.Error) {
	if !in.bound {
		for _, c := range claims {
			if c != "" {
				return c, nil
			}
		}
		return "", nil
	}
	if in.badSubject != nil {
		return "", in.badSubject
	}
	for _, c := range claims {
		if c == "" || c == in.subjectTenant {
			continue
		}
		base := strings.TrimSuffix(in.subject, "."+in.subjectTenant)
		elsewhere := "that tenant's subject"
		if validTenantToken(c) {
			elsewhere = TenantSubject(base, c)
		}
		acts := "the default tenant"
		if in.subjectTenant != "" {
			acts = "tenant " + strconv.Quote(in.subjectTenant)
		}
		return "", errcode.New(errcode.TenantMismatch,
			"subject %s acts for %s only (nats.tenant_subjects is on), and the command names tenant %s: name no tenant, or publish on %s if your NATS user may act for it",
			in.subject, acts, short(c), elsewhere)
	}
	return in.subjectTenant, nil
}

// short quotes s for an error message, cut to a readable length: the
// claimed tenant comes from the sender.
func short(s string) string {
	const max = 80
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}
