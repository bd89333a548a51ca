package cluster

import "github.com/latchd/latch/wire"

// Origins: how a follower tells the leader which client each forwarded request came from,
// for the leader's audit trail (audit.go), without changing the client protocol, the Raft
// log, or what an older latch on either end sees.
//
// The forward channel (cluster/forward, cluster/server) carries the frames of the client
// protocol. A follower asks on each new connection, before any request, with a ping whose
// owner is OriginsAsk. Every latch answers a ping with its owner, so an older leader (and a
// leader that does not audit: it has no use for addresses) answers P OriginsAsk, and the
// follower sends nothing more than before. A leader of this build that audits answers
// P OriginsYes; from then on, on that connection:
//
//   - R with owner 0, token ID and key ADDR binds origin ID (1 to 2^32-1) to the client
//     address ADDR; R with owner 0, token ID and an empty key forgets it. No request has
//     owner 0 (a client's would be answered E bad_owner), so these are never requests, and
//     the leader answers nothing to them.
//   - every request's owner is ID<<32 | a sequence number (OriginOwner), where ID is the
//     origin bound for the client session it came from, or 0 when none is.
//
// The follower binds a client session on its first request over the connection and forgets
// it once the session has ended and nothing of it is in flight there, so a session's address
// travels once per connection, not once per request. An older follower never asks, so a
// leader of this build audits its requests as "peer ADDR", as before.

// The owners of the origins probe and of the leader's yes (the bytes spell "origins?" and
// "origins!").
const (
	OriginsAsk uint64 = 0x6f726967696e733f
	OriginsYes uint64 = 0x6f726967696e7321
)

// MaxOrigins bounds the origins bound on one forward connection; a bind past it is ignored
// (its requests are audited with the connection's own address).
const MaxOrigins = 1 << 20

// MaxOriginLen bounds a bound address (the key tail of the bind frame).
const MaxOriginLen = wire.MaxKey

// OriginOwner is the owner a follower writes a request of origin id with: id in the high 32
// bits, seq in the low ones.
func OriginOwner(id, seq uint32) uint64 { return uint64(id)<<32 | uint64(seq) }

// OriginOf is the origin id of a forwarded request's owner (0: none).
func OriginOf(owner uint64) uint32 { return uint32(owner >> 32) }

// Originated is a Replier whose answers go to one client session of this node: the
// follower's forward link asks it which, to name the session to an auditing leader.
type Originated interface {
	Replier
	Origin() *Session
}

// From is where the session's requests come from: its client's remote address.
func (s *Session) From() string { return s.from }

// Ended reports whether the session has been detached (its connection closed). Safe from
// any goroutine.
func (s *Session) Ended() bool { return s.ended.Load() }

// Origin implements Originated for a forwarded acquire.
func (fw *forwarded) Origin() *Session { return fw.c }

// Origin implements Originated for a grant given back after its client went.
func (d dropAnswer) Origin() *Session { return d.c }

// Audits reports whether the node keeps an audit trail (Config.Audit).
func (n *Node) Audits() bool { return n.audit.on() }

// AttachForward is Attach for a forward connection from a follower: from is its peer
// address as the audit trail names it ("peer ADDR"), via the follower as named after a
// forwarded client's address (its node ID, or its address).
func (n *Node) AttachForward(out Replier, from, via string) *Session {
	return &Session{out: out, from: from, via: via}
}

// BindOrigin binds origin id of forward connection c to the client address addr, until
// ForgetOrigin (OriginsYes). It is ignored for id 0, and past MaxOrigins.
func (n *Node) BindOrigin(c *Session, id uint32, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if id == 0 || len(c.origins) >= MaxOrigins {
		return
	}
	if c.origins == nil {
		c.origins = make(map[uint32]string)
	}
	c.origins[id] = addr
}

// ForgetOrigin drops the binding of origin id of forward connection c.
func (n *Node) ForgetOrigin(c *Session, id uint32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(c.origins, id)
}
