package natsembed

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Users of the embedded server. With none configured the server takes any
// client (the default: a host on one machine, listening on 127.0.0.1).
// With users it requires an nkey from every client and confines each user
// to the subjects it lists, which is how a tenant's router is kept to its
// tenant's command subjects (nats.tenant_subjects). The host itself
// connects in-process as a user of its own, made at start and never
// written anywhere, with every permission.

// User is one client the embedded server admits.
type User struct {
	// Name is for logs.
	Name string
	// NKey is the user's public nkey ("U..."); the client signs with the
	// seed, which the server never sees.
	NKey string
	// Publish and Subscribe are the subjects (wildcards allowed) the user
	// may publish and subscribe to; nothing else is allowed.
	Publish, Subscribe []string
}

// authOptions turns users into server options, adding the host's own
// user. It returns the host's key pair.
func authOptions(so *server.Options, users []User) (nkeys.KeyPair, error) {
	if len(users) == 0 {
		return nil, nil
	}
	host, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("nats: the host's own nkey: %w", err)
	}
	hostPub, err := host.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("nats: the host's own nkey: %w", err)
	}
	so.Nkeys = append(so.Nkeys, &server.NkeyUser{Nkey: hostPub})
	for _, u := range users {
		if !nkeys.IsValidPublicUserKey(u.NKey) {
			return nil, fmt.Errorf("%w: user %q: %q is not a public user nkey (U...)", ErrConfig, u.Name, u.NKey)
		}
		so.Nkeys = append(so.Nkeys, &server.NkeyUser{Nkey: u.NKey, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: u.Publish},
			Subscribe: &server.SubjectPermission{Allow: u.Subscribe},
		}})
	}
	return host, nil
}

// hostAuth is the option the host's connections sign in with, when the
// embedded server has users.
func (n *NATS) hostAuth() []nats.Option {
	if n.hostKey == nil {
		return nil
	}
	pub, err := n.hostKey.PublicKey()
	if err != nil {
		return nil
	}
	return []nats.Option{nats.Nkey(pub, n.hostKey.Sign)}
}
