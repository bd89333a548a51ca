package raftnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	oc "github.com/latchd/latch/cluster/outcome" // "outcome" names a test type here
	"github.com/latchd/latch/fsm"
)

// Leadership, in Consul's shape: raft pushes every transition onto NotifyCh (and blocks
// while the channel is full, stalling the whole node), so monitor drains it at once, never
// blocking on anything else, and starts or stops exactly one leader loop at a time: the next
// loop starts only after the previous one has returned (and with it OnFollower).
//
//	monitor      drains NotifyCh; true -> start a loop (after the previous one exited);
//	             false -> clear leading and stop the running loop
//	leaderLoop   Barrier (retried), token floor, then leading + OnLeader; waits for its
//	             stop; then OnFollower. If it cannot establish leadership it transfers it.
//	Restore      steps aside (leading false, OnFollower) while raft installs a backup,
//	             then back (leading, OnLeader) if the same leadership still holds.
//
// OnLeader and OnFollower run under cbMu, so that the leader loop's calls and Restore's never
// interleave; the lock order is cbMu, then leadMu. monitor takes only leadMu and never waits
// for a callback.

// monitor is the one goroutine that reads notifyCh.
func (n *Node) monitor() {
	defer close(n.monitorDone)
	var (
		want     bool          // raft's last word: leader or not
		stop     chan struct{} // the running loop's stop; nil if none runs
		done     chan struct{} // closed when the running loop returned
		stopping bool          // stop is closed, the loop has not returned yet
	)
	halt := func() {
		n.leadMu.Lock()
		n.leading.Store(false)
		close(stop)
		n.leadMu.Unlock()
		notify(n.pipe.kick) // what is in flight may never be applied here: settle it
		stopping = true
	}
	for {
		select {
		case v := <-n.notifyCh:
			want = v
		case <-done:
			stop, done, stopping = nil, nil, false
		case <-n.stopMonitor:
			if stop != nil {
				if !stopping {
					halt()
				}
				<-done
			}
			return
		}
		if stop != nil && !want && !stopping {
			halt()
		}
		if stop == nil && want {
			stop, done = make(chan struct{}), make(chan struct{})
			go n.leaderLoop(stop, done)
		}
	}
}

// leaderLoop runs while raft says this node leads; stop closes when it no longer does.
func (n *Node) leaderLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		err := n.establish(stop)
		if err == nil {
			break
		}
		if stopped(stop) {
			return
		}
		n.log.Error("could not establish leadership; transferring it", "error", err)
		if err := n.transferLeadership(stop); err != nil && !stopped(stop) {
			n.log.Warn("leadership transfer failed; retrying", "error", err)
		}
		select {
		case <-stop:
			return
		case <-time.After(n.cfg.ElectionTimeout):
		}
	}

	n.cbMu.Lock()
	n.leadMu.Lock()
	if stopped(stop) {
		n.leadMu.Unlock()
		n.cbMu.Unlock()
		return
	}
	n.leading.Store(true)
	n.leadStop = stop
	n.leadMu.Unlock()
	n.log.Info("leading", "term", n.raft.CurrentTerm(), "last_token", n.fsm.LastToken(), "keys", n.fsm.Len())
	if n.cfg.OnLeader != nil {
		n.cfg.OnLeader(n.fsm)
	}
	n.cbMu.Unlock()
	<-stop
	n.log.Info("no longer leading")
	n.cbMu.Lock()
	if n.cfg.OnFollower != nil {
		n.cfg.OnFollower()
	}
	n.cbMu.Unlock()
}

// establish makes this new leader's FSM current (a Barrier: everything any earlier leader
// acknowledged is applied) and applies the token floor if the FSM is below it.
func (n *Node) establish(stop <-chan struct{}) error {
	if err := n.retry(stop, func() error {
		return n.wait(n.raft.Barrier(n.cfg.ApplyTimeout), stop, n.cfg.ApplyTimeout)
	}); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	if err := n.fsm.Err(); err != nil {
		return err // a halted FSM must not lead: it would grant nothing
	}
	if fsm.Token(n.cfg.TokenFloor) <= n.fsm.LastToken() {
		return nil
	}
	return n.retry(stop, func() error { return n.applyFloor(stop) })
}

// applyFloor proposes the token floor as one entry and waits for it to apply. A floor
// never lowers the counter, so proposing it twice is harmless.
func (n *Node) applyFloor(stop <-chan struct{}) error {
	data, err := fsm.AppendBatch(nil, []fsm.Command{{Kind: fsm.CmdFloor, Token: fsm.Token(n.cfg.TokenFloor)}})
	if err != nil {
		return err
	}
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	if err := n.wait(f, stop, n.cfg.ApplyTimeout); err != nil {
		return fmt.Errorf("token floor: %w", err)
	}
	switch r := f.Response().(type) {
	case []fsm.Result:
		if len(r) == 1 && r[0].Kind == fsm.Floored {
			n.log.Info("token floor applied", "floor", n.cfg.TokenFloor, "last_token", r[0].Token)
			return nil
		}
		return fmt.Errorf("token floor: unexpected result %v", r)
	case error:
		return fmt.Errorf("token floor: %w", r)
	default:
		return fmt.Errorf("token floor: unexpected response %T", r)
	}
}

// retry runs op up to establishAttempts times, pausing a little between attempts.
func (n *Node) retry(stop <-chan struct{}, op func() error) error {
	var err error
	for i := 0; i < establishAttempts; i++ {
		if err = op(); err == nil || stopped(stop) {
			return err
		}
		n.log.Warn("establishing leadership", "attempt", i+1, "error", err)
		select {
		case <-stop:
			return errStopped
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

// transferLeadership asks raft to hand leadership to the most up-to-date other voter and
// waits (bounded by ApplyTimeout and stop) until it has, or has failed.
func (n *Node) transferLeadership(stop <-chan struct{}) error {
	return n.wait(n.raft.LeadershipTransfer(), stop, n.cfg.ApplyTimeout)
}

// StepDown hands leadership to another voter when this node leads and has one, bounded by
// ctx and ApplyTimeout: before a planned stop, so that the cluster has a leader at once, not
// after an election timeout, while this node still answers what it is sent. A node that does
// not lead does nothing. Shutdown also steps down, if this node still leads then.
func (n *Node) StepDown(ctx context.Context) error {
	if n.raft.State() != raft.Leader || n.otherVoters() == 0 {
		return nil
	}
	return n.transferLeadership(ctx.Done())
}

// otherVoters counts the voters of the latest configuration other than this node.
func (n *Node) otherVoters() int {
	k := 0
	for _, s := range n.servers() {
		if s.Suffrage == raft.Voter && s.ID != raft.ServerID(n.cfg.ID) {
			k++
		}
	}
	return k
}

// IsLeader reports whether this node leads and has established it (Barrier and token
// floor applied): from just before OnLeader until just before OnFollower. Only then does
// Submit propose anything.
func (n *Node) IsLeader() bool { return n.leading.Load() }

// Leader returns the current leader's ID and address as this node knows them, or empty
// strings if it knows none. The address comes from the cluster configuration (by ID), so
// it is the leader's advertised address; raft's own view is the transport's address.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	if i == "" {
		return "", ""
	}
	for _, s := range n.servers() {
		if s.ID == i {
			return string(i), string(s.Address)
		}
	}
	return string(i), string(a)
}

// watchLeader reports every change of the known leader to OnLeaderChange until stop
// closes. raft pushes a LeaderObservation whenever its leader changes (on a follower, when
// a heartbeat names a new one; on a candidate that wins, at once; empty when it loses one).
// The observer does not block raft: an observation that finds the channel full is dropped,
// which loses nothing, since raft records the leader before it observes and each receive
// reads the leader afresh.
func (n *Node) watchLeader(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ch, stopObserving := observe[raft.LeaderObservation](n.raft, 1)
	defer stopObserving()
	last := "\x00" // no report yet
	report := func() {
		id, addr := n.Leader()
		if key := id + "\x00" + addr; key != last {
			last = key
			n.cfg.OnLeaderChange(id, addr)
		}
	}
	report() // a leader raft found before the observer was registered
	for {
		select {
		case <-ch:
			report()
		case <-stop:
			return
		}
	}
}

// observe registers with r an observer of the observations whose Data is a T and returns
// the channel they arrive on (of size buffer) and the func that deregisters the observer.
// The observer never blocks raft: an observation that finds the channel full is dropped.
func observe[T any](r *raft.Raft, buffer int) (<-chan raft.Observation, func()) {
	ch := make(chan raft.Observation, buffer)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(T)
		return ok
	})
	r.RegisterObserver(obs)
	return ch, func() { r.DeregisterObserver(obs) }
}

// notLeaderErr is the rejection of a command on a node that does not lead.
func (n *Node) notLeaderErr() error {
	id, addr := n.Leader()
	var why error
	switch {
	case id == "":
		why = errors.New("this node is not the leader, and knows no leader")
	case id == n.cfg.ID:
		why = errors.New("this node was elected and is establishing its leadership")
	default:
		why = fmt.Errorf("this node is not the leader (leader: %s at %s)", id, addr)
	}
	return oc.New(oc.NotLeader, why)
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
