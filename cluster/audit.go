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
//	from    where the request came from: the client's address (also for a request a
//	        follower forwarded, when the follower told the leader; see via), "peer ADDR"
//	        for one a follower forwarded without telling (a follower of an older latch: its
//	        peer connection's address), "operator ADDR" for a forced release (the HTTP
//	        remote address of the admin call; "operator" alone when none is known), "leader"
//	        for an expiry
//	via     only when the request came through another node: the follower's node ID (its
//	        peer connection's address when it stated none) for a forwarded request, or the
//	        node that relayed a forced release to the leader over the admin channel
//	cred    only on a forced release made with a credential: which one (Operator.Cred; a
//	        fingerprint, never a secret)
//
// A follower tells the leader its clients' addresses only when the leader wants them: it
// asks on each new forward connection, a leader that audits says yes, and the follower then
// names each client session once per connection (origins.go). So
// `from=10.0.0.5:51234 via=n2` is a client of n2 whose request the leader decided. The
// addresses never enter the Raft log: the line is written where the result arrives at the
// leader, from the session's origin.
//
// A grant or release decided by the log is audited when its result arrives, in log order;
// a release the leader answered N from its view when the answer is sent. Off (nil), each
// site costs one nil check: BenchmarkAudit compares the two.

// auditor is the node's audit logger; nil when auditing is off.
type auditor struct{ log hclog.Logger }

func (a auditor) on() bool { return a.log != nil }

// origin is where one audited request came from: from and, when it came through another
// node, via; cred names the credential of a forced release.
type origin struct{ from, via, cred string }

// args appends o's fields to kv, leaving out those that are empty (but from).
func (o origin) args(kv ...any) []any {
	kv = append(kv, "from", o.from)
	if o.via != "" {
		kv = append(kv, "via", o.via)
	}
	if o.cred != "" {
		kv = append(kv, "cred", o.cred)
	}
	return kv
}

func (a auditor) grant(key []byte, tok fsm.Token, lease uint16, o origin) {
	a.log.Info("grant", o.args("event", "grant", "key", string(key), "token", uint64(tok), "lease", lease, "result", "granted")...)
}

func (a auditor) extend(key []byte, tok fsm.Token, lease uint16, o origin) {
	a.log.Info("extend", o.args("event", "extend", "key", string(key), "token", uint64(tok), "lease", lease, "result", "extended")...)
}

func (a auditor) release(event string, key []byte, tok fsm.Token, result string, o origin) {
	a.log.Info(event, o.args("event", event, "key", string(key), "token", uint64(tok), "result", result)...)
}

// origin is where the request of s with owner came from, for the audit trail: the address
// of the follower's client when s is a forward connection whose follower named the client
// session owner belongs to (origins.go), else s's own address. The caller holds
// n.mu (bindings change under it).
func (s *Session) origin(owner uint64) origin {
	if s == nil {
		return origin{from: "operator"}
	}
	if s.origins != nil {
		if addr, ok := s.origins[OriginOf(owner)]; ok {
			return origin{from: addr, via: s.via}
		}
	}
	return origin{from: s.from}
}

// Operator describes who made an admin call, for the audit trail of a forced release.
type Operator struct {
	Addr string // the HTTP remote address of the call; "" when unknown
	Via  string // the node that relayed the call to the leader; "" when it came here directly
	Cred string // which credential the call proved (a fingerprint, never a secret); "" for none
}

func (o Operator) origin() origin {
	from := "operator"
	if o.Addr != "" {
		from += " " + o.Addr
	}
	return origin{from: from, via: o.Via, cred: o.Cred}
}
