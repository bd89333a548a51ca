package forward

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/wire"
)

// conn is one connection to a leader's forward channel and the requests in flight on it.
type conn struct {
	nc     net.Conn
	leader string
	revs   uint8 // what the channel carries (Config.Dial): wire.FlagLeases or 0; fixed

	mu       sync.Mutex
	inflight map[uint64]*entry // by link-local owner: written (or being written), unanswered
	// unwritten: the batch registered in inflight whose Write has not begun. Failing the
	// connection answers these unavailable (never sent), not indeterminate.
	unwritten []*entry
	draining  bool // the leader changed: no new requests, close when inflight empties
	dead      bool // closed: every entry it had has been answered

	// origins: the leader takes the clients' addresses (origins.go); fixed. bound are the
	// client sessions named to it, nextOrigin the last origin id given out.
	origins    bool
	bound      map[*cluster.Session]*origin
	nextOrigin uint32
}

func newConn(nc net.Conn, leader string, revs uint8, origins bool) *conn {
	c := &conn{nc: nc, leader: leader, revs: revs & wire.OfferFlags, inflight: make(map[uint64]*entry), origins: origins}
	if origins {
		c.bound = make(map[*cluster.Session]*origin)
	}
	return c
}

// leases reports whether c carries protocol revision 2: extends may be written to it, and
// its grants come as G with the leader's age.
func (c *conn) leases() bool { return c.revs&wire.FlagLeases != 0 }

// delivery is one answer on its way to a session.
type delivery struct {
	out cluster.Replier
	r   wire.Response
}

// read is c's reader goroutine: it matches each answer to its request by link owner and
// relays it with the client's owner, until the connection fails or, after a leader change,
// has nothing left in flight.
func (l *Link) read(c *conn) {
	defer l.wg.Done()
	dec := wire.NewResponseDecoder()
	dec.SetFlags(c.revs) // a revised leader answers G, never A; a latch/1 one never G or L
	buf := make([]byte, wire.ReadBuffer)
	var ds []delivery
	for {
		n, err := c.nc.Read(buf)
		why := ""
		if n > 0 {
			ds, why = c.match(dec, buf[:n], ds[:0])
			for _, d := range ds {
				d.out.Reply(d.r)
			}
			clear(ds) // keep no session alive from here
		}
		if why == "" && err != nil {
			why = "read failed: " + err.Error()
			if errors.Is(err, io.EOF) {
				why = "the leader closed the connection"
			}
		}
		if why != "" {
			l.fail(c, why, nil)
			return
		}
		if c.drained() {
			l.retire(c)
			return
		}
	}
}

// match decodes the answers in p and takes their requests out of flight. A non-empty why
// means the stream can no longer be trusted (a malformed frame, an E with owner 0 or one
// that closes, an answer no request in flight can get): the connection must fail.
func (c *conn) match(dec *wire.Decoder, p []byte, ds []delivery) ([]delivery, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(p) > 0 {
		used, done, err := dec.Decode(p)
		p = p[used:]
		if err != nil {
			return ds, "the leader sent a malformed frame: " + err.Error()
		}
		if !done {
			continue
		}
		r := dec.Response()
		if r.Owner == 0 || r.Op == wire.OpError && r.Reason.Closes() {
			return ds, fmt.Sprintf("the leader sent %v owner %d %s: the connection is broken", r.Op, r.Owner, r.Reason)
		}
		e := c.inflight[r.Owner]
		if e == nil || !wire.Answers(e.op, r.Op) {
			return ds, fmt.Sprintf("the leader sent %v for owner %d, which no request in flight can get", r.Op, r.Owner)
		}
		delete(c.inflight, r.Owner)
		e.answered()
		ds = append(ds, delivery{out: e.out, r: relayed(r, e.owner)})
	}
	return ds, ""
}

// drained reports whether c is draining and has nothing left in flight.
func (c *conn) drained() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.draining && !c.dead && len(c.inflight) == 0
}

// overdue reports whether a request in flight on c should have been answered by now.
func (c *conn) overdue(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.inflight {
		if now.After(e.answerBy) {
			return true
		}
	}
	return false
}

// drain stops new requests going to c (the leader changed) and closes it once its requests in
// flight are answered: at once when there are none.
func (l *Link) drain(c *conn) {
	c.mu.Lock()
	c.draining = true
	idle := !c.dead && len(c.inflight) == 0
	c.mu.Unlock()
	if idle {
		l.retire(c)
	}
}

// retire closes c, which has nothing in flight.
func (l *Link) retire(c *conn) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.mu.Unlock()
	c.nc.Close()
	l.forget(c)
	l.log.Debug("forward connection closed: nothing left in flight after a leader change", "leader", c.leader)
}

// fail closes c because it broke (or the link closes) and answers everything in flight on it
// exactly once: E unavailable for the requests in unsent (their bytes never reached the
// socket), E indeterminate for the others (they may have reached the leader and been
// applied). Nothing is ever sent again.
func (l *Link) fail(c *conn, why string, unsent []*entry) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	var never []*entry
	unsent = append(unsent, c.unwritten...)
	c.unwritten = nil
	for _, e := range unsent {
		if c.inflight[e.link] == e {
			delete(c.inflight, e.link)
			never = append(never, e)
		}
	}
	lost := make([]*entry, 0, len(c.inflight))
	for _, e := range c.inflight {
		lost = append(lost, e)
	}
	c.inflight = nil
	c.mu.Unlock()
	c.nc.Close()
	l.forget(c)
	slices.SortFunc(lost, func(a, b *entry) int { return cmp.Compare(a.link, b.link) })
	if len(lost)+len(never) > 0 {
		l.log.Warn("forward connection lost", "leader", c.leader, "why", why, "indeterminate", len(lost), "unavailable", len(never))
	} else {
		l.log.Debug("forward connection closed", "leader", c.leader, "why", why)
	}
	answer(never, wire.ReasonUnavailable)
	answer(lost, wire.ReasonIndeterminate)
}

// relayed is the leader's answer r as the follower's session gets it: with the client's
// owner, and a grant in the node's own shape, Response{Op: OpAcquire, Token, Age}. A G (a
// revised link) keeps the leader's age; an A (a latch/1 link) has age 0. The follower adds
// nothing: the age is the leader's measure from its own read of the frame, and the wait
// between the follower's read and the leader's is not part of any lease (docs/protocol.md
// section 13, "A follower adds nothing to the age"). The session writes G or A, whichever
// its own client speaks.
func relayed(r *wire.Response, owner uint64) wire.Response {
	a := wire.Response{Op: r.Op, Owner: owner, Token: r.Token, Reason: r.Reason}
	switch r.Op {
	case wire.OpGranted:
		a.Op, a.Age = wire.OpAcquire, r.Age
	case wire.OpAcquire:
		a.Age = 0
	}
	return a
}
