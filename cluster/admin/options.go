package admin

import (
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/buildinfo"
	"github.com/latchd/latch/cluster/server"
)

// LocalConfig is what the admin side of a single-mode node is made of.
type LocalConfig struct {
	// Boot is this run's boot id (NewBootID): signatures are good for it only.
	Boot string
	// Admin is the operator's credential: AdminSecrets (--admin-secret-file) and AdminCAs
	// (--admin-tls-ca). The peer fields are not used in single mode.
	Admin Credentials
	// Credentialed is whether the node has any other credential: a client secret
	// (--secret-file), a peer secret (--peer-secret-file) or a peer CA (--tls-ca), the rule
	// cluster mode applies too (member.Config.Validate). A node that authenticates anyone
	// lets only the operator read key names or break locks.
	Credentialed bool
	// HTTP is the --http address, Insecure --insecure: an --http beyond loopback that no
	// credential protects is refused the lock calls, unless Insecure.
	HTTP     string
	Insecure bool
	// Hosts are the names --http answers to (NewHosts).
	Hosts Hosts
	// Build is the running binary's build (buildinfo.Get), which the status shows.
	Build buildinfo.Info
}

// LockCalls are the admin calls of both modes that show key names or break locks.
const LockCalls = "GET /v1/locks, GET /v1/locks/show, POST /v1/locks/release"

// LocalOptions are the admin options of a single-mode node: its status (mode, boot, node
// stats, build), the verifier of this run with the operator's credential, the Host rule, and lock
// inspection with forced release. Those show key names and break locks, so they need the
// operator's credential when the node has any credential, and when its --http is beyond
// loopback (unless Insecure); without it they are off: they answer 403 saying why, and log
// says so once. Cluster mode's options come from cluster/member, whose Validate refuses to
// start in those cases.
func LocalOptions(node *cluster.Node, cfg LocalConfig, log hclog.Logger) Options {
	o := Options{
		Status: func() any {
			return map[string]any{"mode": "single", "boot": cfg.Boot, "node": node.Stats(), "build": cfg.Build}
		},
		Verifier: NewVerifier(Target{Boot: cfg.Boot}, cfg.Admin, nil),
		Locks:    LocalLocks{Node: node},
		Hosts:    cfg.Hosts,
	}
	if cfg.Admin.Operator() {
		return o
	}
	why, turnOn := "", "--admin-secret-file FILE (or --admin-tls-ca FILE with --http-tls)"
	switch {
	case cfg.Credentialed:
		why = "the node has a credential (a client or peer secret, or --tls-ca) but no admin credential"
	case server.CheckListen(cfg.HTTP, false, cfg.Insecure) != nil:
		why, turnOn = "--http is not on loopback and no credential protects it", turnOn+", or --insecure if the network is trusted"
	default:
		return o
	}
	o.Locks = nil
	o.LocksOff = fmt.Errorf("admin: lock inspection and forced release are off on this node: %s; start it with %s to use them", why, turnOn)
	log.Warn("lock inspection and forced release are off", "calls", LockCalls, "why", why, "turn_on", turnOn, "http", cfg.HTTP)
	return o
}

// Operator reports whether c authenticates the operator: admin secrets or admin CAs.
func (c Credentials) Operator() bool { return len(c.AdminSecrets) > 0 || c.AdminCAs != nil }
