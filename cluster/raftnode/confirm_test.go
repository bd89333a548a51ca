package raftnode

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	oc "github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
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

// While the log is busy, a confirmation rides on the next entry handed to raft after it: a
// Confirm made while a command waits for the proposer is answered, nil, by that command's
// entry, and no verification round runs (the wait for an entry is made longer than any
// commit here, so a round would mean the entry did not answer). The proposer is held just
// before raft.Apply so that the second command is still queued when Confirm is called.
func TestConfirmRidesOnTheNextEntry(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader()
	l.n.conf.patience = time.Hour
	if err := confirmOf(t, l.n, testApply+5*time.Second); err != nil { // idle: a round
		t.Fatalf("leader's Confirm: %v", err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	testHookBeforeApply = func() { held <- struct{}{}; <-release }
	t.Cleanup(func() { testHookBeforeApply = nil })

	before := l.n.conf.rounds.Load()
	const calls = 20
	for i := range calls {
		res := make(chan error, 2)
		l.n.Submit(acquire(fmt.Sprintf("ride/%d/a", i)), func(_ fsm.Result, err error) { res <- err })
		<-held // the proposer has the first command, before raft.Apply
		l.n.Submit(acquire(fmt.Sprintf("ride/%d/b", i)), func(_ fsm.Result, err error) { res <- err })
		got := make(chan error, 1)
		l.n.Confirm(func(err error) { got <- err })
		release <- struct{}{}
		<-held // the second command's entry
		release <- struct{}{}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("Confirm %d behind an entry: %v", i, err)
			}
		case <-time.After(testApply + 5*time.Second):
			t.Fatalf("Confirm %d behind an entry did not answer", i)
		}
		for range 2 {
			if err := <-res; err != nil {
				t.Fatalf("Submit %d: %v", i, err)
			}
		}
	}
	if got := l.n.conf.rounds.Load() - before; got != 0 {
		t.Fatalf("%d verification rounds for %d confirmations behind entries, want 0", got, calls)
	}
}

// An entry answers only the calls made before it was handed to raft: the commit of an entry
// numbered at or below a call's count (proposed before the call) leaves it waiting, one
// numbered above answers it, and one of a term other than the call's does not.
func TestConfirmOnlyByALaterEntry(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader()
	if err := confirmOf(t, l.n, testApply+5*time.Second); err != nil {
		t.Fatalf("leader's Confirm: %v", err)
	}
	cf := &l.n.conf
	cf.mu.Lock()
	cf.running = true // no rounds goroutine: only committed answers
	cf.mu.Unlock()
	t.Cleanup(func() {
		cf.mu.Lock()
		cf.running = false
		cf.waiting = nil
		cf.mu.Unlock()
	})

	got := make(chan error, 2)
	l.n.Confirm(func(err error) { got <- err })
	cf.mu.Lock()
	call := cf.waiting[0]
	cf.mu.Unlock()
	l.n.committed(call.after) // proposed before the call
	select {
	case err := <-got:
		t.Fatalf("answered (%v) by an entry proposed before the call", err)
	default:
	}
	cf.mu.Lock()
	call.term-- // as if the call was made in an earlier term
	cf.mu.Unlock()
	l.n.committed(call.after + 1)
	select {
	case err := <-got:
		t.Fatalf("answered (%v) by an entry of another term", err)
	default:
	}
	cf.mu.Lock()
	call.term++
	cf.mu.Unlock()
	l.n.committed(call.after + 1)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("answered %v by a later entry, want nil", err)
		}
	case <-time.After(testApply):
		t.Fatal("a later entry did not answer the call")
	}
}
