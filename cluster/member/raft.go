package member

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// raftAdapter adapts the raft node to the lock node's Proposer and StateReader. The lock
// node is built before raft (raft's leadership hooks call it), so the raft node and its FSM
// are bound once they exist; a Submit before that is answered "not applied". r is the
// Member's own pointer to the raft node (Member.rp), not a copy.
type raftAdapter struct {
	r   *atomic.Pointer[raftnode.Node]
	fsm atomic.Pointer[fsm.FSM]
}

var errNotStarted = errors.New("raft is not started yet")

// Submit implements cluster.Proposer. raftnode's errors carry their outcome, which the node
// maps to a wire reason (package outcome): they pass through unchanged.
func (a *raftAdapter) Submit(cmd fsm.Command, done func(fsm.Result, error)) {
	a.SubmitGroup(fsm.Proposal{Cmd: cmd, Done: done})
}

// SubmitGroup implements cluster.GroupProposer: the commands share one log entry.
func (a *raftAdapter) SubmitGroup(ps ...fsm.Proposal) {
	r := a.r.Load()
	if r == nil {
		go func() {
			for _, p := range ps {
				p.Done(fsm.Result{}, outcome.New(outcome.Unavailable, errNotStarted))
			}
		}()
		return
	}
	r.SubmitGroup(ps...)
}

// Confirm implements cluster.Confirmer.
func (a *raftAdapter) Confirm(done func(error)) {
	r := a.r.Load()
	if r == nil {
		go done(outcome.New(outcome.NotLeader, errNotStarted))
		return
	}
	r.Confirm(done)
}

// Read implements cluster.StateReader.
func (a *raftAdapter) Read(fn func(*fsm.Table)) {
	if f := a.fsm.Load(); f != nil {
		f.Read(fn)
	}
}

// router sends a follower's acquires and releases to the leader (server.Router). Whether
// this node decides is the lock node's own flag (Lead to Follow), so the router can never
// say "local" to a node that is not leading, nor the other way round.
type router struct {
	node *cluster.Node
	link *forward.Link
}

func (r router) Local() bool { return r.node.Leading() }

func (r router) Forward(req *wire.Request, readAt time.Time, out cluster.Replier) {
	r.link.Forward(req, readAt, out)
}

// Leadership reaches the member from raftnode in one order and from one source each:
// OnLeader and OnFollower (the established leadership, from raftnode's leader goroutine)
// switch the lock node, and with it the router, between deciding and forwarding;
// OnLeaderChange (who leads, from raft's leader observation) points the link at the leader.
// Nothing polls.

// lead makes the lock node decide: it rebuilds its view from the FSM, which is current.
func (m *Member) lead(f *fsm.FSM) {
	m.adapter.fsm.Store(f)
	m.node.Lead()
	m.feat.lead()
}

// follow stops the lock node deciding: sessions forward from here on.
func (m *Member) follow() {
	m.feat.follow()
	m.node.Follow()
}

// leaderAt points the forwarding link at the leader raft knows of ("" when none).
// The link logs the change.
func (m *Member) leaderAt(_, addr string) { m.link.SetLeader(addr) }
