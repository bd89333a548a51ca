package cluster

import (
	"time"

	"github.com/latchd/latch/wire"
)

// Forwarder sends a request to the node that decides it (the leader) and delivers exactly
// one answer to out: on a follower, the server's Router over the forward link. Its Forward
// has server.Router's contract: it must not block on the network, and req is not kept.
type Forwarder interface {
	Forward(req *wire.Request, readAt time.Time, out Replier)
}

// Forwarded is the Replier of an acquire of key that c's session sends to the leader
// through f instead of deciding it here (a follower). Every answer goes to c, but a grant
// that arrives after c was detached: its client has gone, and nobody else would release
// the key before its lease ends, so it is released through f at once, as the node releases
// a grant of its own whose session has gone (acquired). key is copied.
func (n *Node) Forwarded(c *Session, key []byte, f Forwarder) Replier {
	return &forwarded{n: n, c: c, key: append([]byte(nil), key...), f: f}
}

type forwarded struct {
	n   *Node
	c   *Session
	key []byte
	f   Forwarder
}

// Reply implements Replier. It is called with no lock held (forward.Link delivers so). A
// grant is handed to c under the node's mutex, as the node's own replies are, so Detach
// cannot come between the check that c is still there and the hand-over.
func (fw *forwarded) Reply(r wire.Response) {
	if r.Op != wire.OpAcquire { // the link hands grants over as the node's own: A, with any age
		fw.c.out.Reply(r)
		return
	}
	fw.n.mu.Lock()
	gone := fw.c.ended.Load()
	if !gone {
		fw.c.out.Reply(r)
	}
	fw.n.mu.Unlock()
	if gone {
		fw.n.log.Info("granted to a client that has gone; releasing it", "key", string(fw.key), "token", r.Token)
		fw.f.Forward(&wire.Request{Op: wire.OpRelease, Owner: 1, Token: r.Token, Key: fw.key}, fw.n.Now(), dropAnswer{fw.c})
	}
}

// dropAnswer is the Replier of a give-back release: its answer matters to no one. c is the
// session whose grant it gives back (its origin, for the leader's audit trail).
type dropAnswer struct{ c *Session }

// Reply implements Replier.
func (dropAnswer) Reply(wire.Response) {}
