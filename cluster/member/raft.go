package member

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// raftAdapter adapts the raft node to the lock node's Proposer and StateReader. The lock
// node is built before raft (raft's leadership hooks call it), so the raft node and its FSM
// are bound once they exist; a Submit before that is answered "not applied".
type raftAdapter struct {
	r       atomic.Pointer[raftnode.Node]
	fsm     atomic.Pointer[fsm.FSM]
	leading atomic.Bool // between OnLeader and OnFollower: sessions decide locally
}

var errNotStarted = errors.New("raft is not started yet")

// Submit implements cluster.Proposer: raftnode's outcome errors become the node's, with the
// cause kept.
func (a *raftAdapter) Submit(cmd fsm.Command, done func(fsm.Result, error)) {
	r := a.r.Load()
	if r == nil {
		go done(fsm.Result{}, fmt.Errorf("%w: %w", cluster.ErrNotApplied, errNotStarted))
		return
	}
	r.Submit(cmd, func(res fsm.Result, err error) { done(res, mapRaftErr(err)) })
}

// SubmitGroup implements cluster.GroupProposer: the commands share one log entry.
func (a *raftAdapter) SubmitGroup(ps []cluster.Proposal) {
	r := a.r.Load()
	if r == nil {
		for _, p := range ps {
			a.Submit(p.Cmd, p.Done)
		}
		return
	}
	rps := make([]raftnode.Proposal, len(ps))
	for i, p := range ps {
		done := p.Done
		rps[i] = raftnode.Proposal{Cmd: p.Cmd, Done: func(res fsm.Result, err error) { done(res, mapRaftErr(err)) }}
	}
	r.SubmitGroup(rps...)
}

// mapRaftErr turns raftnode's outcome errors into the node's, keeping the cause.
func mapRaftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raftnode.ErrNotApplied):
		return fmt.Errorf("%w: %w", cluster.ErrNotApplied, err)
	}
	return fmt.Errorf("%w: %w", cluster.ErrMaybeApplied, err)
}

// Read implements cluster.StateReader.
func (a *raftAdapter) Read(fn func(*fsm.Table)) {
	if f := a.fsm.Load(); f != nil {
		f.Read(fn)
	}
}

// router sends a follower's acquires and releases to the leader (server.Router).
type router struct {
	adapter *raftAdapter
	link    *forward.Link
}

func (r router) Local() bool { return r.adapter.leading.Load() }

func (r router) Forward(req *wire.Request, readAt time.Time, out cluster.Replier) {
	r.link.Forward(req, readAt, out)
}

// watchLeader keeps the link pointed at raft's current leader.
func (m *Member) watchLeader() {
	t := time.NewTicker(leaderPoll)
	defer t.Stop()
	last := "\x00"
	for {
		_, addr := m.raft.Leader()
		if addr != last {
			m.link.SetLeader(addr)
			last = addr
		}
		select {
		case <-m.done:
			return
		case <-t.C:
		}
	}
}

// leaderPoll is how often a node looks whether raft's leader changed, for forwarding.
const leaderPoll = 50 * time.Millisecond
