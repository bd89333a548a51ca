package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Readiness: a node is ready to serve when it knows a leader, is a voter or nonvoter of its
// latest configuration, and its lock table has applied at least the commit index the leader
// had when it was asked (on the leader: its leadership is established, which includes its
// Barrier). Applied means applied by the FSM, not handed to it (fsmCaughtUp).
//
// Why the leader is asked: raft's commit index on a follower is not the leader's. A
// follower sets it from an AppendEntries to min(LeaderCommitIndex, its own last index), so
// a follower whose log is behind sees a commit index that it has already reached; raft's
// heartbeats carry no commit index at all, so a follower that has just restarted knows the
// leader (from a heartbeat) with a commit index of 0 while the leader's replication to it is
// still in its failure backoff (up to some 10 s). Neither says how far behind it is. The
// leader's own commit index does: Config.LeaderCommit asks it (cmd asks over the peer admin
// channel) and the answer is cached.
const (
	// readyFresh: an answer younger than this is used as it is, without asking again.
	readyFresh = 500 * time.Millisecond
	// readyAskTimeout bounds one ask; it runs in the background, so a slow answer still
	// serves the next Ready.
	readyAskTimeout = 3 * time.Second
	// readyWait bounds one Ready call: waiting for the leader's answer, then for raft to
	// apply up to it (a follower that keeps up applies it within a commit timeout, ~50 ms).
	readyWait = 500 * time.Millisecond
)

// readiness is the leader's answer Ready last got, and the ask in flight.
type readiness struct {
	ask    func(ctx context.Context, id, addr string) (uint64, error) // Config.LeaderCommit
	ctx    context.Context                                            // ends at Shutdown
	cancel context.CancelFunc

	mu     sync.Mutex
	leader string        // whom the answer is from
	target uint64        // its commit index when asked
	at     time.Time     // when it answered; zero if the last ask failed
	err    error         // why the last ask failed
	asking chan struct{} // closed when the ask in flight ends; nil if none
}

// Ready returns nil when this node is ready to serve (see the comment above readiness):
// followers forward, so it does not require leadership. Otherwise the error says why in one
// line: "not a member ...", "no leader known ...", "elected leader, establishing
// leadership ...", "catching up: applied 3 of 11 (leader n1)" or "asking the leader ...".
// It returns within about half a second.
func (n *Node) Ready() error {
	if n.closing.Load() {
		return ErrShutdown
	}
	if err := n.fsm.Err(); err != nil {
		return err
	}
	if err := n.disk.Err(); err != nil {
		return err
	}
	if err := n.memberErr(); err != nil {
		return err
	}
	id, addr := n.Leader()
	if id == "" {
		return errors.New("no leader known: an election is under way, or a quorum is unreachable")
	}
	if id == n.cfg.ID {
		if !n.IsLeader() {
			return errors.New("elected leader, establishing leadership (barrier)")
		}
		return nil
	}
	deadline := time.Now().Add(readyWait)
	target := n.raft.CommitIndex() // without Config.LeaderCommit: raft's own (weaker, see above)
	if n.ready.ask != nil {
		var err error
		if target, err = n.ready.targetOf(id, addr, deadline); err != nil {
			return err
		}
	}
	for {
		applied := n.raft.AppliedIndex()
		fsmAt, caughtUp := n.fsmCaughtUp(target)
		if applied >= target && caughtUp {
			return nil
		}
		if !time.Now().Before(deadline) {
			if applied >= target {
				return fmt.Errorf("catching up: the lock table has applied entry %d of %d (leader %s)", fsmAt, target, id)
			}
			return fmt.Errorf("catching up: applied %d of %d (leader %s)", applied, target, id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fsmCaughtUp reports whether the lock table has applied every command entry up to index,
// and the last entry it applied. raft's AppliedIndex is not that: raft counts an entry as
// applied once it has handed it to the FSM's goroutine, whose queue can hold many batches of
// entries, each carrying up to 256 commands (a follower restarted empty next to a million
// held keys was ready with a third of them). Entries raft never hands to the FSM (no-ops,
// configurations) between the FSM's index and index do not count, nor do entries up to the
// last snapshot this node wrote or installed (the table is restored from it before raft
// counts it applied, and a restored backup carries the index of the cluster it came from,
// which may be lower).
func (n *Node) fsmCaughtUp(index uint64) (uint64, bool) {
	at := n.fsm.AppliedIndex()
	from := at
	if n.promise != nil {
		from = max(from, n.promise.snapshot().SnapshotIndex)
	}
	for i := from + 1; i <= index; i++ {
		var l raft.Log
		if err := n.wal.GetLog(i, &l); err != nil || l.Type == raft.LogCommand {
			return at, false // a command still to apply, or an entry not in the log (a snapshot to restore)
		}
	}
	return at, true
}

// memberErr is nil when this node is a voter or nonvoter of its latest configuration.
func (n *Node) memberErr() error {
	ss := n.servers()
	for _, s := range ss {
		if string(s.ID) == n.cfg.ID && (s.Suffrage == raft.Voter || s.Suffrage == raft.Nonvoter) {
			return nil
		}
	}
	if len(ss) == 0 {
		return errors.New("not a member yet: no configuration (waiting to be added to the cluster)")
	}
	return fmt.Errorf("not a member of the current configuration (%d members, %s not among them): removed, or not added yet", len(ss), n.cfg.ID)
}

// LeaderCommit is this node's answer to a follower's Config.LeaderCommit: its commit index,
// if it leads with its leadership established; else an error wrapping NotLeader.
func (n *Node) LeaderCommit() (uint64, error) {
	if !n.IsLeader() {
		return 0, n.notLeaderErr()
	}
	return n.raft.CommitIndex(), nil
}

// targetOf returns the commit index the leader id had when last asked: a fresh answer as it
// is, otherwise it asks (one ask at a time) and waits for the answer until deadline.
func (r *readiness) targetOf(id, addr string, deadline time.Time) (uint64, error) {
	r.mu.Lock()
	if r.leader == id && !r.at.IsZero() && time.Since(r.at) < readyFresh {
		t := r.target
		r.mu.Unlock()
		return t, nil
	}
	if r.asking == nil {
		r.asking = make(chan struct{})
		go r.askLeader(id, addr, r.asking)
	}
	done := r.asking
	r.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-r.ctx.Done():
		return 0, ErrShutdown
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.leader == id && !r.at.IsZero() && time.Since(r.at) < readyAskTimeout+readyFresh:
		return r.target, nil
	case r.leader == id && r.err != nil:
		return 0, fmt.Errorf("asking the leader %s (%s) for its commit index: %v", id, addr, r.err)
	}
	return 0, fmt.Errorf("asking the leader %s (%s) for its commit index: no answer yet", id, addr)
}

func (r *readiness) askLeader(id, addr string, done chan struct{}) {
	ctx, cancel := context.WithTimeout(r.ctx, readyAskTimeout)
	defer cancel()
	target, err := r.ask(ctx, id, addr)
	r.mu.Lock()
	r.leader, r.target, r.err, r.at = id, target, err, time.Time{}
	if err == nil {
		r.at = time.Now()
	}
	r.asking = nil
	r.mu.Unlock()
	close(done)
}
