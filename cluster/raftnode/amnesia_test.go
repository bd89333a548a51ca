package raftnode

import (
	"os"
	"testing"
	"time"

	"github.com/latchd/latch/fsm"
)

// A member whose disk was lost and that starts again under its ID, empty, takes part in no
// election until it has caught up with a leader: with the leader down too, the one member
// that kept its log cannot be elected with the wiped one's vote (it might lack grants only
// the leader and the wiped member had), and the wiped one sends no vote requests of its own.
// Once the old leader is back, a leader is elected, the wiped member catches up and votes
// again, and nothing committed is lost.
func TestWipedMemberWithholdsItsVoteUntilCaughtUp(t *testing.T) {
	c := newTCPCluster(t, 3, nil)
	l := c.leader()
	want := map[string]fsm.Token{"before": grant(t, l.n, "before")}
	c.converged(want, want["before"])
	fs := c.followers()
	kept, wiped := fs[0], fs[1]

	// All three stop, the leader last, when it has no one to hand its leadership to (as if
	// it crashed); wiped loses its disk. kept and wiped start again, the leader does not.
	c.shutdown(wiped)
	if err := os.RemoveAll(wiped.dir); err != nil {
		t.Fatal(err)
	}
	c.shutdown(kept)
	c.shutdown(l)
	c.restart(kept)
	saved := c.peers // as cluster/member starts it: a member of a cluster that exists bootstraps nothing
	c.peers = nil
	c.restart(wiped)
	c.peers = saved
	if !wiped.n.filter.amnesiac.Load() {
		t.Fatal("a member started with no raft state takes part in elections before it has caught up")
	}

	// Without the withholding, kept would win within two election timeouts: give it five.
	deadline := time.Now().Add(5 * testHB)
	for time.Now().Before(deadline) {
		if kept.n.IsLeader() || wiped.n.IsLeader() {
			t.Fatalf("a leader was elected with the vote of a member that lost its log (kept leads: %v)", kept.n.IsLeader())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if wiped.n.Status().RefusedRPCs == 0 {
		t.Fatal("the wiped member refused no vote request: the scenario does not test what it should")
	}

	c.restart(l)
	nl := c.leader()
	eventually(t, wiped.id+" catches up and takes part in elections", func() bool { return !wiped.n.filter.amnesiac.Load() })
	want["after"] = grant(t, nl.n, "after")
	c.converged(want, want["after"])
}
