package main

import (
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/expiry"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// handoverLease is the lease each holder of the test takes, in seconds; handoverLate bounds
// how long after a holder's grant arrived the next waiter may get the key. It is below
// expiry.SweepInterval: a grant left to the backstop sweep comes 0-5 s after the lease end.
const (
	handoverLease = 2
	handoverLate  = 3500 * time.Millisecond
)

// In cluster mode the leader's expiry timer ends a lease on time and grants the key's next
// waiter then, not at the next backstop sweep. A holder on the leader takes a 2 s lease; a
// waiter through a follower gets the key at its end, and so does a second waiter (through
// the other follower) behind the first: the second handover makes the test fail every time
// the timer is broken, since the sweep that granted the first comes back only 5 s later.
func TestClusterWaiterGrantedAtLeaseEnd(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	if handoverLate >= expiry.SweepInterval {
		t.Fatalf("bound %v is not below the sweep interval %v", handoverLate, expiry.SweepInterval)
	}
	fc := startFixedCluster(t, 3)
	l, f := fc.leaderAndFollower()
	const key = "handover/at-lease-end"
	holder, waiter, second := fc.conn(l), fc.conn(f), fc.conn(3-l-f)

	sent := time.Now() // the lease runs from the grant, which is after this
	holder.Raw(t, wiretest.Acquire(1, 0, handoverLease, key))
	tok := holder.ExpectGrant(t, 1)
	granted := time.Now()

	// The first waiter's lease runs from its grant, which is at or after the holder's lease
	// end, itself at or after sent+2 s: so the second handover is not before sent+4 s.
	tok1, granted1 := awaitHandover(t, waiter, 2, key, sent.Add(handoverLease*time.Second), granted, tok)
	awaitHandover(t, second, 3, key, sent.Add(2*handoverLease*time.Second), granted1, tok1)
}

// awaitHandover sends, on c, an acquire of key with a 10 s wait and a 2 s lease, which the
// current holder (granted prevTok, its A arrived at prevGranted) makes wait. It fails unless
// the A comes back not before notBefore, less than handoverLate after prevGranted, and with a
// token above prevTok. It returns the token and when the A arrived.
func awaitHandover(t *testing.T, c *wiretest.Conn, owner uint64, key string, notBefore, prevGranted time.Time, prevTok uint64) (uint64, time.Time) {
	t.Helper()
	c.Raw(t, wiretest.Acquire(owner, 10, handoverLease, key))
	r := c.NextWithin(t, 12*time.Second)
	arrived := time.Now()
	if r.Op != wire.OpAcquire || r.Owner != owner {
		t.Fatalf("waiter %d: got %s, want A", owner, wiretest.Describe(r))
	}
	after := arrived.Sub(prevGranted)
	t.Logf("waiter %d granted %v after the previous holder's grant arrived (token %d after %d)",
		owner, after.Round(time.Millisecond), r.Token, prevTok)
	if arrived.Before(notBefore) {
		t.Fatalf("waiter %d granted %v before the previous lease can have ended", owner, notBefore.Sub(arrived))
	}
	if after >= handoverLate {
		t.Fatalf("waiter %d granted %v after the previous grant, want under %v (the expiry timer did not hand over; the %v sweep did)",
			owner, after, handoverLate, expiry.SweepInterval)
	}
	if r.Token <= prevTok {
		t.Fatalf("waiter %d: token %d after %d", owner, r.Token, prevTok)
	}
	return r.Token, arrived
}
