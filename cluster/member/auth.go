package member

import "errors"

// Refusals of checkPrincipals.
var (
	errPeerUnauthenticated = errors.New("the peer port (--raft-addr) needs its own credential once the node has any: " +
		"pass --peer-secret-file FILE (a secret that clients do not hold; moving from one shared secret: deploy/README.md) " +
		"or mutual TLS between peers (--tls-cert, --tls-key and --tls-ca)")
	errAdminUnauthenticated = errors.New("admin calls on --http need their own credential once the node has any: " +
		"pass --admin-secret-file FILE, or --admin-tls-ca FILE with --http-tls")
)

// checkPrincipals refuses a member that authenticates some of its three principals
// (clients, peers, operators; docs/SECURITY.md) and leaves another open: with any
// credential, the peer port and admin calls must have their own (clients may stay
// unauthenticated where --listen allows it). A member with none follows the loopback rule
// (server.CheckListen) on each address instead.
func (c Config) checkPrincipals() error {
	client, peer, admin := len(c.Server.Secrets) > 0, c.Peer.Authenticated(), c.Admin.Operator()
	switch {
	case !client && !peer && !admin:
		return nil
	case !peer:
		return errPeerUnauthenticated
	case !admin:
		return errAdminUnauthenticated
	}
	return nil
}
