package raftnode

import (
	"errors"
	"sync"
	"testing"
	"time"

	oc "github.com/latchd/latch/cluster/outcome"
)

// confirmOf calls n.Confirm and waits (at most bound) for its answer.
func confirmOf(t *testing.T, n *Node, bound time.Duration) error {
	t.Helper()
	got := make(chan error, 1)
	n.Confirm(func(err error) { got <- err })
	select {
	case err := <-got:
		return err
	case <-time.After(bound):
		t.Fatalf("Confirm did not answer within %v", bound)
		return nil
	}
}

// The leader's Confirm succeeds, a burst of them share rounds and all succeed, a follower's
// fails at once as not leader, and a leader that lost its quorum is not confirmed: it
// answers with a not-leader error within ApplyTimeout, never nil.
func TestConfirmLeadership(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader()
	if err := confirmOf(t, l.n, testApply+5*time.Second); err != nil {
		t.Fatalf("leader's Confirm: %v", err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		l.n.Confirm(func(err error) { errs <- err; wg.Done() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a Confirm of a burst on the leader: %v", err)
		}
	}

	f := c.followers()[0]
	if err := confirmOf(t, f.n, testApply+5*time.Second); !errors.Is(err, oc.NotLeader) {
		t.Fatalf("follower's Confirm: %v, want NotLeader", err)
	}

	for _, tn := range c.followers() {
		c.shutdown(tn)
	}
	err := confirmOf(t, l.n, testApply+testLease+10*time.Second)
	if !errors.Is(err, oc.NotLeader) || !errors.Is(err, oc.Unavailable) {
		t.Fatalf("Confirm of a leader without its quorum: %v, want a not-leader error", err)
	}
}
