package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/behaviour"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Sections 1, 4 and 7 as far as they are single mode's own: the token floor and its end,
// lease expiry and the sweep, what a closed connection leaves. What must hold in every mode
// (grants, releases, waiters, ping, bad keys, pipelining) is the behaviour suite, run here
// against single mode and by cluster/member and cmd/latch against the other modes.

// The behaviour suite against a single-mode server.
func TestBehaviour(t *testing.T) {
	slow(t)
	ts := startServer(t)
	behaviour.Run(t, behaviour.Nodes{
		Clients: []string{ts.addr},
		Count:   func(*testing.T) int { return ts.node.Stats().Waiters },
	})
}

// The node's last-token gauge is the last token granted.
func TestLastToken(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	var last uint64
	for i := range uint64(5) {
		c.Send(t, wiretest.Acquire(i+1, 0, 60, fmt.Sprint("key-", i)))
		last = c.ExpectGrant(t, i+1)
	}
	if st := ts.node.Stats(); st.LastToken != last {
		t.Fatalf("node's last token %d, last granted %d", st.LastToken, last)
	}
}

func TestTokenFloor(t *testing.T) {
	for _, floor := range []uint64{0, 1, 999, 1 << 40, wire.MaxToken - 10} {
		t.Run(fmt.Sprint(floor), func(t *testing.T) {
			ts := startServer(t, withTokenFloor(floor))
			c := ts.dial(t)
			c.Send(t, wiretest.Acquire(1, 0, 30, "a"))
			if tok := c.ExpectGrant(t, 1); tok != floor+1 {
				t.Fatalf("first token %d, want floor+1 = %d", tok, floor+1)
			}
		})
	}
}

// Section 7, single mode: once a lease is over, the key is free to an acquire with wait 0 at
// once (lazily, without waiting for the sweep), and the old token is N. (Cluster mode frees it
// by an expiry through the log, a little later; the behaviour suite holds what both share.)
func TestLeaseExpiresLazily(t *testing.T) {
	slow(t)
	ts := startServer(t)
	c := ts.dial(t)
	c.Send(t, wiretest.Acquire(1, 0, 1, "short"))
	old := c.ExpectGrant(t, 1)
	answered := time.Now()                                        // the grant was earlier
	time.Sleep(time.Until(answered.Add(1100 * time.Millisecond))) // let the lease run out
	c.Send(t, wiretest.Acquire(3, 0, 30, "short"))
	tok := c.ExpectGrant(t, 3)
	if tok <= old {
		t.Fatalf("token %d not above %d", tok, old)
	}
	c.Send(t, wiretest.Release(4, old, "short"))
	c.Expect(t, resp(wire.OpNotHeld, 4))
}

// The 5 s sweep frees expired leases nobody touches, and grants the waiter: within one sweep
// interval after the lease ends, never before.
func TestSweepGrantsWaiter(t *testing.T) {
	slow(t)
	ts := startServer(t)
	h, w := ts.dial(t), ts.dial(t)
	start := time.Now()
	h.Send(t, wiretest.Acquire(1, 0, 1, "k"), wiretest.Acquire(2, 0, 1, "alone"))
	tok := h.ExpectGrant(t, 1)
	h.ExpectGrant(t, 2)
	w.Send(t, wiretest.Acquire(3, 30, 60, "k"))
	next := w.ExpectGrant(t, 3)
	within(t, "waiter granted by the sweep", time.Since(start), time.Second, time.Second+5*time.Second+clustertest.Bound)
	if next <= tok {
		t.Fatalf("waiter token %d not above %d", next, tok)
	}
	// "alone" had no waiter and no request touched it: the sweep dropped it too.
	ts.waitStats(t, clustertest.Bound, "sweep frees the untouched key", func(s cluster.Stats) bool { return s.Keys == 1 })
	h.Send(t, wiretest.Release(4, tok, "k"))
	h.Expect(t, resp(wire.OpNotHeld, 4))
	w.Send(t, wiretest.Release(5, next, "k"))
	w.Expect(t, resp(wire.OpRelease, 5))
}

// Section 4: at floor 2^63-3 two grants are left; then every acquire is E token_exhausted,
// forever, and the connection stays. Releases keep working.
func TestTokenExhaustion(t *testing.T) {
	ts := startServer(t, withTokenFloor(wire.MaxToken-2))
	c := ts.dial(t)
	c.Send(t, wiretest.Acquire(1, 0, 30, "a"))
	ta := c.ExpectGrant(t, 1)
	c.Send(t, wiretest.Acquire(2, 0, 30, "b"))
	tb := c.ExpectGrant(t, 2)
	if ta != wire.MaxToken-1 || tb != wire.MaxToken {
		t.Fatalf("tokens %d %d, want %d %d", ta, tb, wire.MaxToken-1, wire.MaxToken)
	}
	c.Send(t, wiretest.Acquire(3, 0, 30, "c"))
	c.ExpectError(t, 3, wire.ReasonTokenExhausted)
	c.Alive(t, 4)
	c.Send(t, wiretest.Release(5, ta, "a"))
	c.Expect(t, resp(wire.OpRelease, 5))
	for i := range uint64(5) {
		owner := 10 + i
		c.Send(t, wiretest.Acquire(owner, 0, 30, "a"))
		c.ExpectError(t, owner, wire.ReasonTokenExhausted)
		c.Alive(t, 100+i)
	}
	// "every acquire": also one of a held key, with or without wait.
	c.Send(t, wiretest.Acquire(20, 0, 30, "b"))
	c.ExpectError(t, 20, wire.ReasonTokenExhausted)
	c.Send(t, wiretest.Acquire(21, 5, 30, "b"))
	c.ExpectError(t, 21, wire.ReasonTokenExhausted)
	c.Send(t, wiretest.Release(22, tb, "b"))
	c.Expect(t, resp(wire.OpRelease, 22))
	c.Send(t, wiretest.Acquire(23, 0, 30, "b"))
	c.ExpectError(t, 23, wire.ReasonTokenExhausted)
	if st := ts.node.Stats(); st.Keys != 0 || st.Waiters != 0 || st.LastToken != wire.MaxToken {
		t.Fatalf("after exhaustion: %+v", st)
	}
}

// A floor of 2^63-1 leaves no token at all: the first acquire is already token_exhausted.
func TestTokenFloorAtMax(t *testing.T) {
	ts := startServer(t, withTokenFloor(wire.MaxToken))
	c := ts.dial(t)
	c.Send(t, wiretest.Acquire(1, 0, 30, "a"), wiretest.Acquire(2, 9, 30, "a"))
	c.ExpectError(t, 1, wire.ReasonTokenExhausted)
	c.ExpectError(t, 2, wire.ReasonTokenExhausted)
	c.Send(t, wiretest.Release(3, wire.MaxToken, "a"))
	c.Expect(t, resp(wire.OpNotHeld, 3))
	c.Alive(t, 4)
}

// A waiter queued before the last token was issued is answered token_exhausted when the key
// frees, not left hanging and not granted a wrapped token.
func TestTokenExhaustionAnswersWaiter(t *testing.T) {
	ts := startServer(t, withTokenFloor(wire.MaxToken-2))
	h, w := ts.dial(t), ts.dial(t)
	h.Send(t, wiretest.Acquire(1, 0, 30, "a"))
	ta := h.ExpectGrant(t, 1)
	w.Send(t, wiretest.Acquire(2, 60, 30, "a"))
	ts.waitWaiters(t, 1)
	h.Send(t, wiretest.Acquire(3, 0, 30, "b"))
	h.ExpectGrant(t, 3) // the last token
	h.Send(t, wiretest.Release(4, ta, "a"))
	h.Expect(t, resp(wire.OpRelease, 4))
	w.ExpectError(t, 2, wire.ReasonTokenExhausted)
	w.Alive(t, 5)
	ts.waitWaiters(t, 0)
}

// Section 1: closing a connection releases nothing, but its waiters are dropped.
func TestCloseKeepsLocksDropsWaiters(t *testing.T) {
	ts := startServer(t)
	holder, waiter := ts.dial(t), ts.dial(t)
	holder.Send(t, wiretest.Acquire(1, 0, 60, "k"))
	tok := holder.ExpectGrant(t, 1)
	waiter.Send(t, wiretest.Acquire(2, 60, 60, "k"), wiretest.Acquire(3, 60, 60, "k"))
	ts.waitWaiters(t, 2)
	waiter.Close()
	ts.waitStats(t, 10*time.Second, "waiters of a closed connection dropped", func(s cluster.Stats) bool {
		return s.Waiters == 0 && s.Pending == 0
	})
	holder.Close()
	eventually(t, 10*time.Second, "both connections gone", func() bool { return ts.connections(t) == 0 })
	c := ts.dial(t)
	c.Send(t, wiretest.Acquire(4, 0, 60, "k"))
	c.Expect(t, resp(wire.OpTimeout, 4)) // still held
	if st := ts.node.Stats(); st.Keys != 1 {
		t.Fatalf("keys %d, want the closed holder's 1", st.Keys)
	}
	// The dropped waiters are not granted the key on release; the release frees it.
	c.Send(t, wiretest.Release(5, tok, "k"))
	c.Expect(t, resp(wire.OpRelease, 5))
	c.Send(t, wiretest.Acquire(6, 0, 60, "k"))
	if next := c.ExpectGrant(t, 6); next != tok+1 {
		t.Fatalf("token %d, want %d: a dropped waiter took a token", next, tok+1)
	}
}
