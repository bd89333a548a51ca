package raftnode

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	oc "github.com/latchd/latch/cluster/outcome" // "outcome" names a test type here
)

// Server is one member of the cluster configuration.
type Server struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Suffrage string `json:"suffrage"` // "voter", "nonvoter" or "staging"
}

// Status is a point-in-time view of the node for operators (admin status, metrics). Its
// fields are read one after another, not atomically.
type Status struct {
	ID           string    `json:"id"`
	Addr         string    `json:"addr"`
	State        string    `json:"state"`   // raft's: Follower, Candidate, Leader or Shutdown
	Leading      bool      `json:"leading"` // IsLeader: leader with leadership established
	LeaderID     string    `json:"leader_id"`
	LeaderAddr   string    `json:"leader_addr"`
	Term         uint64    `json:"term"`
	CommitIndex  uint64    `json:"commit_index"`
	AppliedIndex uint64    `json:"applied_index"` // raft's: handed to the FSM
	LastLogIndex uint64    `json:"last_log_index"`
	LastContact  time.Time `json:"last_contact"` // last contact with a leader; zero if never
	Peers        []Server  `json:"peers"`        // latest configuration, possibly uncommitted
	LastToken    uint64    `json:"last_token"`   // FSM: last fencing token issued
	Keys         int       `json:"keys"`         // FSM: held keys
	FSMIndex     uint64    `json:"fsm_index"`    // FSM: last entry it applied
	FSMError     string    `json:"fsm_error,omitempty"`
	Queued       int       `json:"queued"`   // commands waiting to be packed
	InFlight     int       `json:"inflight"` // entries proposed, not yet answered
	Entries      uint64    `json:"entries"`  // entries proposed since Open
	Commands     uint64    `json:"commands"` // commands in those entries
	// RefusedRPCs counts Raft RPCs refused since Open (filter.go): their sender is not in the
	// configuration, or they are malformed.
	RefusedRPCs uint64 `json:"refused_rpcs"`
	// MalformedRPCs counts the refused RPCs that named a member but held fields no correct
	// raft peer sends (validate.go): a faulty node, or someone posing as a member.
	MalformedRPCs uint64 `json:"malformed_rpcs"`
}

// Status returns the node's current status.
func (n *Node) Status() Status {
	s := Status{
		ID:           n.cfg.ID,
		Addr:         n.addr,
		State:        n.raft.State().String(),
		Leading:      n.IsLeader(),
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		LastLogIndex: n.raft.LastIndex(),
		LastContact:  n.raft.LastContact(),
		Peers:        n.Servers(),
		LastToken:    uint64(n.fsm.LastToken()),
		Keys:         n.fsm.Len(),
		FSMIndex:     n.fsm.AppliedIndex(),
		InFlight:     len(n.slots),
		Entries:      n.entries.Load(),
		Commands:     n.commands.Load(),
		RefusedRPCs:  n.filter.Refused(),
	}
	s.LeaderID, s.LeaderAddr = n.Leader()
	s.MalformedRPCs = n.filter.Malformed()
	if err := n.fsm.Err(); err != nil {
		s.FSMError = err.Error()
	}
	n.q.mu.Lock()
	s.Queued = n.q.count
	n.q.mu.Unlock()
	return s
}

// servers returns the latest configuration (possibly not yet committed), or nil.
func (n *Node) servers() []raft.Server {
	f := n.raft.GetConfiguration()
	if err := n.wait(f, nil, n.cfg.ApplyTimeout); err != nil {
		return nil
	}
	return f.Configuration().Servers
}

// Servers returns the members of the latest cluster configuration, possibly not yet
// committed.
func (n *Node) Servers() []Server {
	ss := n.servers()
	out := make([]Server, len(ss))
	for i, s := range ss {
		out[i] = Server{ID: string(s.ID), Addr: string(s.Address), Suffrage: suffrage(s.Suffrage)}
	}
	return out
}

func suffrage(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return "voter"
	case raft.Nonvoter:
		return "nonvoter"
	default:
		return "staging"
	}
}

// AddVoter adds a voting member, or changes the address of an existing one; on the leader
// only. The new voter counts towards the quorum at once, before it has caught up: to grow
// a cluster, use AddVoterCaughtUp. Errors are of outcome Unavailable (NotLeader on a
// follower) or Indeterminate (check Servers before retrying).
func (n *Node) AddVoter(id, addr string) error {
	return n.change("add voter", id, func() raft.IndexFuture {
		return n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.ApplyTimeout)
	})
}

// AddVoterCaughtUp adds a voting member without weakening the cluster while it catches up,
// on the leader only. A member that is not in the configuration yet (or is there with another
// address) is first added as a nonvoter; lastIndex, which asks the member itself for its last
// log index, is then polled every poll until the member has reached the commit index the
// leader had once the member was in; only then is it made a voter. A member that is a voter
// already just goes through AddVoter (an address change, or nothing).
//
// When ctx ends first the member stays a nonvoter: it keeps replicating, it never counts for
// the quorum, and calling this again resumes. The error then wraps ErrNotCaughtUp, has the
// outcome Indeterminate (the configuration changed, the vote was not given) and says what
// the member last answered. Other errors as AddVoter.
func (n *Node) AddVoterCaughtUp(ctx context.Context, id, addr string, poll time.Duration, lastIndex func(context.Context) (uint64, error)) error {
	if !n.IsLeader() {
		return fmt.Errorf("raftnode: add voter %q: %w", id, n.notLeaderErr())
	}
	cur := n.server(id)
	if cur != nil && cur.Suffrage == raft.Voter {
		return n.AddVoter(id, addr)
	}
	if cur == nil || string(cur.Address) != addr {
		if err := n.AddNonvoter(id, addr); err != nil {
			return err
		}
	}
	target := n.raft.CommitIndex() // at least the entry that made it a member
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if err := n.stillNonvoter(id, addr); err != nil {
			return err
		}
		got, err := lastIndex(ctx)
		if err == nil && got >= target {
			// The vote goes only to the nonvoter this call added, checked again under the
			// lock every configuration change of this node takes: a removal while it caught
			// up is never undone (AddVoter on an id no longer there would add it back).
			return n.changeIf("add voter", id, func() error { return n.stillNonvoter(id, addr) }, func() raft.IndexFuture {
				return n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.ApplyTimeout)
			})
		}
		select {
		case <-ctx.Done():
			saw := fmt.Sprintf("its last log index was %d", got)
			if err != nil {
				saw = "asking it failed: " + err.Error()
			}
			// Indeterminate, not unavailable: the call changed the configuration (the nonvoter
			// is in it) although it did not do what was asked; running it again is safe.
			return oc.New(oc.Indeterminate, fmt.Errorf("%w: %q (%s) is left in the configuration as a nonvoter and replicates, but had not reached index %d "+
				"before the deadline (%s); start it if it is not running (with --join), and add it again once it has caught up, "+
				"or remove it with latch peers remove",
				ErrNotCaughtUp, id, addr, target, saw))
		case <-tick.C:
		}
	}
}

// stillNonvoter returns nil if id is a nonvoter at addr in the latest configuration, else an
// error of outcome Unavailable saying what it is now.
func (n *Node) stillNonvoter(id, addr string) error {
	now := n.server(id)
	if now == nil || now.Suffrage != raft.Nonvoter || string(now.Address) != addr {
		return fmt.Errorf("raftnode: add voter %q: %w: the configuration changed while it caught up (%s); nothing was done",
			id, oc.Unavailable, describeMember(now))
	}
	return nil
}

// server returns id's entry in the latest configuration, or nil.
func (n *Node) server(id string) *raft.Server {
	for _, s := range n.servers() {
		if string(s.ID) == id {
			return &s
		}
	}
	return nil
}

func describeMember(s *raft.Server) string {
	if s == nil {
		return "it is no longer a member"
	}
	return fmt.Sprintf("it is now a %s at %s", suffrage(s.Suffrage), s.Address)
}

// AddNonvoter adds a member that receives the log but does not vote; on the leader only.
// Errors as AddVoter.
func (n *Node) AddNonvoter(id, addr string) error {
	return n.change("add nonvoter", id, func() raft.IndexFuture {
		return n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.ApplyTimeout)
	})
}

// RemoveServer removes a member; on the leader only. Removing the leader itself makes it
// step down once the change commits (it stays up as a follower outside the cluster: shut it
// down); prefer Shutdown on the leader (which transfers leadership) and removing it from the
// new leader. Errors as AddVoter.
func (n *Node) RemoveServer(id string) error {
	return n.change("remove server", id, func() raft.IndexFuture {
		return n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)
	})
}

func (n *Node) change(what, id string, op func() raft.IndexFuture) error {
	return n.changeIf(what, id, nil, op)
}

// changeIf runs the configuration change op, and waits for it, under confMu; check, if set,
// runs first under the same lock and can refuse the change.
func (n *Node) changeIf(what, id string, check func() error, op func() raft.IndexFuture) error {
	if n.closing.Load() {
		return unavailable(ErrShutdown)
	}
	n.confMu.Lock()
	defer n.confMu.Unlock()
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	f := op()
	err := n.wait(f, nil, n.cfg.ApplyTimeout)
	if err == ErrTimeout {
		return fmt.Errorf("raftnode: %s %q: %w", what, id, indeterminate(err))
	}
	if err != nil {
		return fmt.Errorf("raftnode: %s %q: %w", what, id, classify(err, f.Index()))
	}
	n.log.Info("configuration changed", "change", what, "id", id, "index", f.Index())
	return nil
}

// Snapshot makes raft take a snapshot now (for backups, or before adding a node) and
// returns its metadata. An error wrapping raft.ErrNothingNewToSnapshot means nothing was
// applied since the last one. The wait is bounded by ctx and ApplyTimeout.
func (n *Node) Snapshot(ctx context.Context) (*raft.SnapshotMeta, error) {
	if n.closing.Load() {
		return nil, ErrShutdown
	}
	f := n.raft.Snapshot()
	if err := n.wait(f, ctx.Done(), n.cfg.ApplyTimeout); err != nil {
		if err == errStopped {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("raftnode: snapshot: %w", err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("raftnode: snapshot: %w", err)
	}
	_ = rc.Close()
	return meta, nil
}

// Progress is the part of Status that is cheap to read often (metrics): it reads no
// configuration.
type Progress struct {
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LastLogIndex uint64
	LastContact  time.Time // zero on the leader and on a node that never heard from one
	Leading      bool
}

// Progress returns the node's current progress.
func (n *Node) Progress() Progress {
	p := Progress{
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		LastLogIndex: n.raft.LastIndex(),
		Leading:      n.IsLeader(),
	}
	if n.raft.State() != raft.Leader {
		p.LastContact = n.raft.LastContact()
	}
	return p
}

// Voters counts the voters of the latest configuration.
func (n *Node) Voters() int {
	k := 0
	for _, s := range n.servers() {
		if s.Suffrage == raft.Voter {
			k++
		}
	}
	return k
}
