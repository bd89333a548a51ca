package raftnode

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	oc "github.com/latchd/latch/cluster/outcome"
)

// errDeposed: a confirmation found a newer term than the one its caller read under.
var errDeposed = errors.New("raftnode: leadership changed since the state was read")

// piggybackWait is how long the rounds goroutine waits for the next entry to be answered
// before it gives up on the log answering its calls and runs a verification round instead.
// It is not a bound on any answer (a call is answered by an entry or by a round, whichever
// comes first); only the latency of a call under a stalled pipeline.
const piggybackWait = 20 * time.Millisecond

// confirms answers Confirm calls. A call is answered by whichever comes first of:
//
//   - the commit of an entry the proposer gave raft after the call began (a quorum stored an
//     entry of this leader's term that was appended after the call: the same evidence a
//     heartbeat round started after the call gives, at no extra cost while the log is busy);
//   - a round of raft.VerifyLeader that began after it (the rounds goroutine runs one when
//     no entry is on its way that could answer the waiting calls).
//
// One round or one entry answers every call waiting for it. Its fields are guarded by mu.
type confirms struct {
	mu      sync.Mutex
	waiting []*confirmCall // not yet answered, in call order
	running bool           // a goroutine is running rounds
	settled chan struct{}  // cap 1: the pipeline answered an entry

	patience time.Duration // the wait for an entry before a round; 0: piggybackWait (tests set it)
	rounds   atomic.Uint64 // verification rounds run
}

type confirmCall struct {
	term  uint64 // raft's term when Confirm was called
	after uint64 // the proposer's entry count then: an entry numbered above it answers
	done  func(error)
}

// Confirm calls done(nil) once raft has confirmed that this node still leads, in the term it
// had when Confirm was called, at a moment after the call: a quorum stored an entry appended
// after the call, or answered a heartbeat round that began after it. Whatever the caller read
// from its leader's state before calling Confirm could then not have been changed by another
// leader. Otherwise done gets an error with the outcome NotLeader (nothing was proposed; the
// caller answers "unavailable").
//
// done is called exactly once, never on the caller's goroutine, and within ApplyTimeout
// (plus piggybackWait). Concurrent calls share entries and rounds: while the log is busy a
// burst of them costs nothing extra; while it is idle, a few heartbeats and no log entry.
func (n *Node) Confirm(done func(error)) {
	if !n.leading.Load() {
		err := n.notLeaderErr()
		go done(err)
		return
	}
	c := &n.conf
	c.mu.Lock()
	// The term and the count are read after the call began, so an entry numbered above
	// after is handed to raft after the call.
	c.waiting = append(c.waiting, &confirmCall{term: n.raft.CurrentTerm(), after: n.proposed.Load(), done: done})
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go n.confirmRounds()
	}
}

// committed is called by the pipeline once the entry numbered seq was committed and
// applied: it answers every call waiting that began before the entry was handed to raft, in
// the term the node still leads in.
func (n *Node) committed(seq uint64) {
	c := &n.conf
	var answer []*confirmCall
	c.mu.Lock()
	if len(c.waiting) > 0 && n.leading.Load() {
		term := n.raft.CurrentTerm()
		keep := c.waiting[:0]
		for _, call := range c.waiting {
			// A term still equal to the call's (terms only grow) means the entry, appended
			// after the call, was appended in that term: the call's leadership held then.
			if call.after < seq && call.term == term {
				answer = append(answer, call)
			} else {
				keep = append(keep, call)
			}
		}
		clear(c.waiting[len(keep):])
		c.waiting = keep
	}
	c.mu.Unlock()
	notify(c.settled)
	for _, call := range answer {
		call.done(nil)
	}
}

// confirmRounds runs while calls are waiting: it lets entries on their way answer them, and
// runs a verification round when none is.
func (n *Node) confirmRounds() {
	c := &n.conf
	patience := c.patience
	if patience == 0 {
		patience = piggybackWait
	}
	timer := time.NewTimer(patience) // go 1.23+ timers: Reset and Stop need no drain
	defer timer.Stop()
	for {
		c.mu.Lock()
		if len(c.waiting) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		newest := c.waiting[len(c.waiting)-1].after
		c.mu.Unlock()
		if n.leading.Load() && n.entryComing(newest) {
			timer.Reset(patience)
			select {
			case <-c.settled:
				timer.Stop()
				continue // answered, or look again
			case <-timer.C:
			case <-n.shutdownDone:
			}
		}
		n.verifyRound()
	}
}

// entryComing reports whether an entry that would answer a call with count after is on its
// way: handed to raft and not yet answered, or queued for the proposer (it will be handed to
// raft after the call, so numbered above after). An entry in flight that was handed to raft
// before the call does not answer it, but the proposer packs what arrives meanwhile once it
// is answered, so while the log is busy the wait is about one commit.
func (n *Node) entryComing(after uint64) bool {
	if n.proposed.Load() > n.answered.Load() {
		return true
	}
	n.q.mu.Lock()
	queued := n.q.count > 0
	n.q.mu.Unlock()
	return queued || n.proposed.Load() > after
}

// verifyRound runs one raft.VerifyLeader round for the calls waiting when it starts, and
// answers those the log did not answer meanwhile.
func (n *Node) verifyRound() {
	c := &n.conf
	c.mu.Lock()
	calls := append([]*confirmCall(nil), c.waiting...)
	c.mu.Unlock()
	c.rounds.Add(1)
	err := n.verify()
	term := n.raft.CurrentTerm()
	c.mu.Lock()
	mine := make(map[*confirmCall]bool, len(calls))
	for _, call := range calls {
		mine[call] = true
	}
	var answer []*confirmCall
	keep := c.waiting[:0]
	for _, call := range c.waiting {
		if mine[call] {
			answer = append(answer, call)
		} else {
			keep = append(keep, call)
		}
	}
	clear(c.waiting[len(keep):])
	c.waiting = keep
	c.mu.Unlock()
	for _, call := range answer {
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
