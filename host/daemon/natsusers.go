package daemon

import (
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/control/natscmd"
	"github.com/kvpilot/kvpilot/host/natsembed"
)

// natsUsers turns nats.users into the embedded server's users: each may
// publish commands on its tenants' subjects only (nats.tenant_subjects
// makes the subject the tenant), and subscribe to its replies and to the
// KV events a router reads.
func natsUsers(c config.Config) []natsembed.User {
	worker, broadcast := c.WorkerSubject(), c.NATS.BroadcastSubject
	var out []natsembed.User
	for _, u := range c.NATS.Users {
		var pub []string
		for _, t := range u.Tenants {
			switch t {
			case config.TenantWildcard:
				pub = append(pub, worker, broadcast, natscmd.TenantSubject(worker, "*"), natscmd.TenantSubject(broadcast, "*"))
			case "":
				pub = append(pub, worker, broadcast)
			default:
				pub = append(pub, natscmd.TenantSubject(worker, t), natscmd.TenantSubject(broadcast, t))
			}
		}
		out = append(out, natsembed.User{Name: u.Name, NKey: u.NKey, Publish: pub,
			Subscribe: []string{"_INBOX.>", c.EventsSubject()}})
	}
	return out
}
