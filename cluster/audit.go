package cluster

import (
	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/fsm"
)

// The audit trail: with Config.Audit set, every grant, release, expiry and forced release
// the deciding node learns the outcome of is one structured line on that logger, at INFO:
//
//	event   grant, extend, release, expire or force_release
//	key     the key
//	token   the fencing token granted, released or expired
//	lease   the lease granted, in seconds (grant), or the new lease (extend)
//	result  granted, extended, released, not_held, expired, or the wire reason of an error
//	from    where the request came from: the client's address, "peer ADDR" for one a
//	        follower forwarded (the follower's peer address), "operator" for a forced
//	        release, "leader" for an expiry
//
// A grant or release decided by the log is audited when its result arrives, in log order;
// a release the leader answered N from its view when the answer is sent. Off (nil), each
// site costs one nil check: BenchmarkAudit compares the two.

// auditor is the node's audit logger; nil when auditing is off.
type auditor struct{ log hclog.Logger }

func (a auditor) on() bool { return a.log != nil }

func (a auditor) grant(key []byte, tok fsm.Token, lease uint16, from string) {
	a.log.Info("grant", "event", "grant", "key", string(key), "token", uint64(tok), "lease", lease, "result", "granted", "from", from)
}

func (a auditor) extend(key []byte, tok fsm.Token, lease uint16, from string) {
	a.log.Info("extend", "event", "extend", "key", string(key), "token", uint64(tok), "lease", lease, "result", "extended", "from", from)
}

func (a auditor) release(event string, key []byte, tok fsm.Token, result, from string) {
	a.log.Info(event, "event", event, "key", string(key), "token", uint64(tok), "result", result, "from", from)
}

// origin is where a session's requests come from, for the audit trail.
func (s *Session) origin() string {
	if s == nil {
		return "operator"
	}
	return s.from
}
