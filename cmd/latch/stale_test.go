package main

import (
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// TestClusterPausedLeaderNeverAnswersFromAStaleView: the leader is stopped (SIGSTOP) past a
// lease it granted. The others elect a leader, which restarts that lease in full, and a
// second lock the old leader granted is released there. The old leader is resumed and asked
// at once, on the connection it granted on, to release the first lock and to take the second
// with wait 0. Its own view says the first lease ran out and the second lock is held, so
// before leadership was confirmed for such answers it said N (while the new leader still held
// the lease for its holder) and T (for a free lock). The release must be answered R (the old
// node had stepped down and forwarded it) or E unavailable (it could not confirm that it
// still leads), never N; and after it the lock is released, or the holder's retry with the
// new leader releases it. The acquire must be granted or answered E, never T.
func TestClusterPausedLeaderNeverAnswersFromAStaleView(t *testing.T) {
	clustertest.Slow(t, "starts three processes and pauses the leader past a lease")
	const lease = 8 // seconds: the resume comes after it, and well before the new leader's restarted lease ends
	tc := startTestCluster(t, 3)
	old, c := tc.dialLeader(t)
	tok := c.Do(t, wiretest.Acquire(1, 0, lease, "paused")).Token
	freed := c.Do(t, wiretest.Acquire(6, 0, 60, "paused/freed")).Token

	stoppedAt := time.Now()
	resume := tc.procs[old].freeze(t)
	nl := tc.leader(old)
	led := logTime(t, tc.procs[nl], "leading: lock view rebuilt")
	n := tc.procs[nl].dial(t)
	n.Raw(t, wiretest.Release(7, freed, "paused/freed"))
	n.ExpectOp(t, wire.OpRelease, 7)
	resumeAt := stoppedAt.Add(lease*time.Second + 300*time.Millisecond)
	if newEnd := led.Add(lease * time.Second); !resumeAt.Before(newEnd.Add(-300 * time.Millisecond)) {
		t.Fatalf("the new leader led at %v, %v after the stop: its restarted lease ends too soon for this test", led, led.Sub(stoppedAt))
	}
	time.Sleep(time.Until(resumeAt))

	resume()
	c.Raw(t, append(wiretest.Release(2, tok, "paused"), wiretest.Acquire(5, 0, 30, "paused/freed")...))
	got := c.NextByOwner(t, 2)
	r, a := got[2], got[5]
	t.Logf("the resumed old leader answered the release %s and the acquire %s, %v after the new leader took over",
		wiretest.Describe(r), wiretest.Describe(a), time.Since(led))
	if a.Op == wire.OpTimeout {
		t.Fatalf("the resumed old leader answered T from its stale view: the new leader had released the lock")
	}
	if a.Op != wire.OpAcquire && !(a.Op == wire.OpError && (a.Reason == wire.ReasonUnavailable || a.Reason == wire.ReasonIndeterminate)) {
		t.Fatalf("unexpected answer to the acquire %s", wiretest.Describe(a))
	}
	switch {
	case r.Op == wire.OpNotHeld:
		t.Fatalf("the resumed old leader answered N from its stale view: the new leader still holds the lease for token %d", tok)
	case r.Op == wire.OpRelease:
	case r.Op == wire.OpError && (r.Reason == wire.ReasonUnavailable || r.Reason == wire.ReasonIndeterminate):
		// The client's retry: the new leader still holds the lease for tok.
		n.Raw(t, wiretest.Release(3, tok, "paused"))
		n.ExpectOp(t, wire.OpRelease, 3)
	default:
		t.Fatalf("unexpected answer %s", wiretest.Describe(r))
	}

	// The lock is free now: the new leader grants it at once, above tok.
	if got := n.Do(t, wiretest.Acquire(4, 0, 30, "paused")).Token; got <= tok {
		t.Fatalf("token %d after the release, not above %d", got, tok)
	}
}
