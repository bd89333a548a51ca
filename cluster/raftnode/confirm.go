package raftnode

import (
	"errors"
	"fmt"
	"sync"

	oc "github.com/latchd/latch/cluster/outcome"
)

// errDeposed: a confirmation found a newer term than the one its caller read under.
var errDeposed = errors.New("raftnode: leadership changed since the state was read")

// confirms coalesces Confirm calls into rounds of raft.VerifyLeader: every call waits for the
// first round that starts after it, and one round answers all calls waiting for it. Its
// fields are guarded by mu.
type confirms struct {
	mu      sync.Mutex
	waiting []confirmCall // registered since the running round started
	running bool          // a goroutine is running rounds
}

type confirmCall struct {
	term uint64 // raft's term when Confirm was called
	done func(error)
}

// Confirm calls done(nil) once raft has confirmed that this node still leads, in the term it
// had when Confirm was called, at a moment after the call: a quorum answered a heartbeat
// round that began after it. Whatever the caller read from its leader's state before calling
// Confirm could then not have been changed by another leader. Otherwise done gets an error
// with the outcome NotLeader (nothing was proposed; the caller answers "unavailable").
//
// done is called exactly once, never on the caller's goroutine, and within ApplyTimeout.
// Concurrent calls share rounds: a burst of them costs a few heartbeats, no log entry.
func (n *Node) Confirm(done func(error)) {
	if !n.leading.Load() {
		err := n.notLeaderErr()
		go done(err)
		return
	}
	c := &n.conf
	c.mu.Lock()
	c.waiting = append(c.waiting, confirmCall{term: n.raft.CurrentTerm(), done: done})
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go n.confirmRounds()
	}
}

// confirmRounds runs verification rounds while calls are waiting.
func (n *Node) confirmRounds() {
	c := &n.conf
	for {
		c.mu.Lock()
		calls := c.waiting
		c.waiting = nil
		if len(calls) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		err := n.verify()
		term := n.raft.CurrentTerm()
		for _, call := range calls {
			switch {
			case err != nil:
				call.done(err)
			case call.term != term:
				call.done(oc.New(oc.NotLeader, errDeposed))
			default:
				call.done(nil)
			}
		}
	}
}

// verify runs one raft.VerifyLeader round, bounded by ApplyTimeout and by shutdown.
func (n *Node) verify() error {
	if !n.leading.Load() || n.closing.Load() {
		return n.notLeaderErr()
	}
	if err := n.wait(n.raft.VerifyLeader(), n.shutdownDone, n.cfg.ApplyTimeout); err != nil {
		return oc.New(oc.NotLeader, fmt.Errorf("raftnode: leadership not confirmed: %w", err))
	}
	if !n.leading.Load() {
		return n.notLeaderErr()
	}
	return nil
}
