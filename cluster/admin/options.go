package admin

import (
	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
)

// LocalOptions are the admin options of a single-mode node on HTTP address httpAddr: its
// status (mode, boot, node stats), the verifier of this run (boot) with the operator's
// credential, and lock inspection with forced release. Inspection shows key names and breaks
// locks, so it is left out (and log says why) when httpAddr is not on loopback and no admin
// credential protects it, unless insecure. Cluster mode's options come from cluster/member.
func LocalOptions(node *cluster.Node, boot string, cred Credentials, httpAddr string, insecure bool, log hclog.Logger) Options {
	o := Options{
		Status:   func() any { return map[string]any{"mode": "single", "boot": boot, "node": node.Stats()} },
		Verifier: NewVerifier(Target{Boot: boot}, cred, nil),
		Locks:    LocalLocks{Node: node},
	}
	if !cred.Operator() && server.CheckListen(httpAddr, false, insecure) != nil {
		o.Locks = nil
		log.Warn("lock inspection and forced release (/v1/locks) are off: --http is not on loopback and no admin credential is set; pass --admin-secret-file FILE (or --insecure)", "http", httpAddr)
	}
	return o
}

// Operator reports whether c authenticates the operator: admin secrets or admin CAs.
func (c Credentials) Operator() bool { return len(c.AdminSecrets) > 0 || c.AdminCAs != nil }
