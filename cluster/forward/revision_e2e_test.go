package forward_test

import (
	"testing"
	"time"

	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/cluster/servertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Revision 2 end to end, with real sessions at both ends: a client session of the follower
// (revised or latch/1), the link, and the leader's forward session (ServePeer). The
// nodes are single-mode nodes, which serve revision 2 to their clients.

// dialRevised connects a client to m and makes a handshake that offers revision 2; it fails
// the test unless m's hello echoes the offer.
func (m *member) dialRevised(t *testing.T) *wiretest.Conn {
	t.Helper()
	c := wiretest.Dial(t, m.addr)
	cn, err := wire.NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	c.Send(t, wiretest.Hello(wire.Version, wire.FlagLeases, cn))
	h := c.Next(t)
	revs, err := wire.AcceptFlags(wire.FlagLeases, h.Hello.Flags)
	if h.Op != wire.OpHello || err != nil || revs != wire.FlagLeases {
		t.Fatalf("hello: %s (%v); want the offer echoed", wiretest.Describe(h), err)
	}
	c.SetFlags(revs)
	return c
}

// A follower whose link is revised: a revised client gets G with the leader's age (at least
// the time it was queued on the leader, at most the time the client waited), extends and
// their answers; a latch/1 client of the same follower, on the same link, gets A.
func TestRevisedLinkEndToEnd(t *testing.T) {
	ld := startLeader(t)
	addr := servertest.ServePeersFlags(t, ld.srv, wire.FlagLeases)
	link := newLink(t, addr, func(c *forward.Config) { c.Dial = revised(tcpDial) })
	f := startFollower(t, link)
	rc, old := f.dialRevised(t), f.dial(t)

	g := rc.Do(t, wiretest.Acquire(1, 0, 60, "k"))
	if g.Op != wire.OpGranted || g.Owner != 1 || g.Token == 0 {
		t.Fatalf("grant through a revised link: %s, want G for owner 1", wiretest.Describe(g))
	}
	rc.Send(t, wiretest.Extend(2, g.Token, 90, "k"))
	rc.ExpectOp(t, wire.OpExtend, 2)
	rc.Send(t, wiretest.Extend(3, g.Token+100, 90, "k"))
	rc.ExpectOp(t, wire.OpNotHeld, 3)

	// A latch/1 client's grant, forwarded on the same revised link, is an A.
	a := old.Do(t, wiretest.Acquire(4, 0, 60, "j"))
	if a.Op != wire.OpAcquire || a.Owner != 4 || a.Token <= g.Token {
		t.Fatalf("latch/1 grant through a revised link: %s, want A for owner 4", wiretest.Describe(a))
	}

	// A waiter queued on the leader: its age covers its time in the queue, and never more
	// than the client waited.
	const queued = 500 * time.Millisecond
	start := time.Now()
	rc.Send(t, wiretest.Acquire(5, 30, 60, "k"))
	ld.waitWaiters(t, 1)
	time.Sleep(queued)
	rc.Send(t, wiretest.Release(6, g.Token, "k"))
	got := rc.NextByOwner(t, 2)
	waited := time.Since(start)
	if r := got[6]; r.Op != wire.OpRelease {
		t.Fatalf("release: %s, want R", wiretest.Describe(r))
	}
	w := got[5]
	if w.Op != wire.OpGranted {
		t.Fatalf("waiter: %s, want G", wiretest.Describe(w))
	}
	if age := time.Duration(w.Age) * time.Millisecond; age < queued || age > waited {
		t.Fatalf("waiter's age %v: want at least its %v in the leader's queue and at most the %v the client waited", age, queued, waited)
	}
	idle(t, link)
	f.untouched(t)
	if st := link.Stats(); st.Revs != wire.FlagLeases {
		t.Fatalf("link stats %+v, want a connection of revision 2", st)
	}
}

// A follower whose link is latch/1 (the leader's peer port had only the latch/1 channel): a
// revised client still gets G, with age 0 (the follower adds none), and its extends are
// answered E unsupported without reaching the leader, whose session would close the link on
// an L. The link stays up for the latch/1 client.
func TestLatch1LinkEndToEnd(t *testing.T) {
	ld := startLeader(t) // ServePeer: latch/1
	link := newLink(t, ld.peer)
	f := startFollower(t, link)
	rc, old := f.dialRevised(t), f.dial(t)

	g := rc.Do(t, wiretest.Acquire(1, 0, 60, "k"))
	if g.Op != wire.OpGranted || g.Owner != 1 || g.Token == 0 || g.Age != 0 {
		t.Fatalf("grant through a latch/1 link: %s, want G for owner 1 with age 0", wiretest.Describe(g))
	}
	rc.Send(t, wiretest.Extend(2, g.Token, 90, "k"))
	rc.ExpectError(t, 2, wire.ReasonUnsupported)
	old.Grant(t, 3, 0, 60, "j")
	rc.Send(t, wiretest.Release(4, g.Token, "k"))
	rc.ExpectOp(t, wire.OpRelease, 4)
	if st := link.Stats(); st.Conns != 1 || st.Revs != 0 {
		t.Fatalf("link stats %+v, want the one latch/1 connection", st)
	}
	f.untouched(t)
}
