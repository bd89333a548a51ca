package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// A voter whose disk was lost, started again empty under its id and still a voter of the
// configuration (what a StatefulSet does when a pod's volume is replaced), has forgotten
// every entry it acknowledged: with one more failure before it has caught up, its vote could
// elect a node that lacks committed entries. Here: the leader A and the follower X commit
// grants while the follower B is frozen (it falls behind); A crashes and X's disk is lost; X
// is started empty with its flags and B resumes. B's log is as up to date as X's empty one,
// so if X voted, B would lead without the grants A and X committed, and grant their keys and
// issue their tokens again. X withholds its vote until it has caught up with a leader
// (cluster/raftnode/amnesia.go), and no leader can catch it up while A is down: a cluster of
// three that lost a disk and a process stops serving instead.
//
// The other way back (deploy/README.md): remove the lost member first (`latch peers
// remove`, through a live node: it needs a quorum of the old configuration, so the surviving
// followers have the log), then start it empty with --join, which adds it as a nonvoter and
// gives it its vote once it has caught up.

// TestWipedVoterRejoiningEmptyWaitsToCatchUp: the voter started empty under its id elects
// nobody before it has caught up.
func TestWipedVoterRejoiningEmptyWaitsToCatchUp(t *testing.T) {
	clustertest.Slow(t, "starts three processes and loses a node's data directory")
	wipedVoter(t, false)
}

// TestWipedVoterRemovedThenJoinedLosesNothing is the same failures with the safe way back:
// the lost member is removed before it starts empty with --join; then A crashes. Whoever
// leads afterwards (if anyone: the two voters left may not be a quorum) has every grant.
func TestWipedVoterRemovedThenJoinedLosesNothing(t *testing.T) {
	clustertest.Slow(t, "starts three processes and loses a node's data directory")
	wipedVoter(t, true)
}

// wipedVoter runs the scenario above, with the safe way back if removeFirst.
func wipedVoter(t *testing.T, removeFirst bool) {
	sec := newTestSecrets(t)
	tc := startTestCluster(t, 3, sec.serverArgs()...)
	dial := func(p *proc) *wiretest.Conn {
		c := wiretest.Dial(t, p.listen)
		c.Hello(t, []byte(clientSecretValue))
		return c
	}
	a := tc.leader()
	c := dial(tc.procs[a])
	b, x := (a+1)%3, (a+2)%3
	resumeB := tc.procs[b].freeze(t)

	// Committed by A and X only: B is frozen. Long leases, so every key is still held at the end.
	const keys = 20
	var last uint64
	for i := range keys {
		last = c.Do(t, wiretest.Acquire(uint64(i+1), 0, 600, fmt.Sprintf("wiped/%d", i))).Token
	}
	t.Logf("n%d leads; n%d frozen; %d grants committed by n%d and n%d, tokens up to %d", a+1, b+1, keys, a+1, x+1, last)

	id := fmt.Sprintf("n%d", x+1)
	tc.procs[x].kill(t) // X's machine dies with its disk
	if err := os.RemoveAll(tc.nodeDir(x)); err != nil {
		t.Fatal(err)
	}
	if removeFirst {
		resumeB()
		if code, out := run(t, nil, "peers", "remove", "--http", tc.procs[a].http, "--id", id, "--admin-secret-file", sec.admin); code != 0 {
			t.Fatalf("latch peers remove --id %s: exit %d: %s", id, code, out)
		}
		tc.procs[x] = spawnServer(t, nil, append(append([]string(nil), tc.args[x]...), "--join", tc.procs[a].http)...)
		tc.procs[a].kill(t) // A crashes at once, before X has caught up or right after
	} else {
		tc.procs[a].kill(t) // A crashes, its disk intact
		tc.procs[x] = spawnServer(t, nil, tc.args[x]...)
		resumeB()
	}

	// Either nothing leads (one disk and one process of three are gone), or whoever leads
	// has every committed grant.
	deadline := time.Now().Add(15 * time.Second) // the quarantine and several elections
	for time.Now().Before(deadline) {
		for _, i := range []int{b, x} {
			if !tc.leading(i) {
				continue
			}
			st, err := tc.status(i)
			if err != nil {
				continue
			}
			if st.Raft.LastToken < last {
				t.Errorf("n%d leads in term %d with last token %d, below the %d committed before: committed entries are lost", i+1, st.Raft.Term, st.Raft.LastToken, last)
			}
			key := fmt.Sprintf("wiped/%d", keys-1) // the last grant: surely after the freeze
			nc := dial(tc.procs[i])
			nc.Raw(t, wiretest.Acquire(100, 0, 30, key))
			if r := nc.Next(t); r.Op == wire.OpAcquire {
				t.Fatalf("n%d leads and granted %s again, token %d, while the grant of token %d holds it for 600 s", i+1, key, r.Token, last)
			} else {
				t.Logf("n%d leads (term %d, last token %d) and answers %s for the held key %s", i+1, st.Raft.Term, st.Raft.LastToken, wiretest.Describe(r), key)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("no leader within 15 s with n%d down and n%d's disk lost: the cluster stopped serving, as it must", a+1, x+1)
}
