package main

import (
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// TestClusterPausedLeaderNeverAnswersAStaleN: the leader is stopped (SIGSTOP) past a lease it
// granted. The others elect a leader, which restarts that lease in full. The old leader is
// resumed and asked at once, on the connection it granted on, to release the lock: its own
// view says the lease ran out, so before leadership was confirmed for such answers it said N
// while the new leader still held the lease for its holder. The answer must be R (the old
// node had stepped down and forwarded it) or E unavailable (it could not confirm that it
// still leads), never N; and after it the lock is released, or the holder's retry with the
// new leader releases it.
func TestClusterPausedLeaderNeverAnswersAStaleN(t *testing.T) {
	clustertest.Slow(t, "starts three processes and pauses the leader past a lease")
	const lease = 8 // seconds: the resume comes after it, and well before the new leader's restarted lease ends
	tc := startTestCluster(t, 3)
	old := tc.leader()
	c := wiretest.Dial(t, tc.procs[old].listen)
	c.Hello(t, nil)
	tok := c.Do(t, wiretest.Acquire(1, 0, lease, "paused")).Token

	stoppedAt := time.Now()
	resume := tc.procs[old].freeze(t)
	nl := tc.leader(old)
	led := logTime(t, tc.procs[nl], "leading: lock view rebuilt")
	resumeAt := stoppedAt.Add(lease*time.Second + 300*time.Millisecond)
	if newEnd := led.Add(lease * time.Second); !resumeAt.Before(newEnd.Add(-300 * time.Millisecond)) {
		t.Fatalf("the new leader led at %v, %v after the stop: its restarted lease ends too soon for this test", led, led.Sub(stoppedAt))
	}
	time.Sleep(time.Until(resumeAt))

	resume()
	c.Raw(t, wiretest.Release(2, tok, "paused"))
	r := c.Next(t)
	t.Logf("the resumed old leader answered the release %s, %v after the new leader took over", wiretest.Describe(r), time.Since(led))
	switch {
	case r.Op == wire.OpNotHeld:
		t.Fatalf("the resumed old leader answered N from its stale view: the new leader still holds the lease for token %d", tok)
	case r.Op == wire.OpRelease:
	case r.Op == wire.OpError && (r.Reason == wire.ReasonUnavailable || r.Reason == wire.ReasonIndeterminate):
		// The client's retry: the new leader still holds the lease for tok.
		n := wiretest.Dial(t, tc.procs[nl].listen)
		n.Hello(t, nil)
		n.Raw(t, wiretest.Release(3, tok, "paused"))
		n.ExpectOp(t, wire.OpRelease, 3)
	default:
		t.Fatalf("unexpected answer %s", wiretest.Describe(r))
	}

	// The lock is free now: the new leader grants it at once, above tok.
	n := wiretest.Dial(t, tc.procs[nl].listen)
	n.Hello(t, nil)
	if got := n.Do(t, wiretest.Acquire(4, 0, 30, "paused")).Token; got <= tok {
		t.Fatalf("token %d after the release, not above %d", got, tok)
	}
}
