package raftnode

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// A member that starts with no raft state and does not found a cluster may be one whose
// disk was lost (a pod whose volume was replaced starts again under its own ID with its own
// flags). It has forgotten entries it acknowledged: some committed entries may now be held
// only by the old leader, and every other log, however far behind, is as up to date as its
// empty one. If it voted, or stood, before it has them again, a follower that lacks them
// could win an election with it (the leader crashing meanwhile), and committed grants would
// be lost: keys granted twice, tokens issued again. So until it has applied the leader's
// commit index as of some moment after its start (Ready: every entry committed before the
// loss is at or below it), it withholds its vote (RequestVote and RequestPreVote are
// answered with an error), refuses TimeoutNow, and sends no vote requests of its own. If the
// leader is gone for good before it catches up, the cluster waits for the old leader, or
// for an operator (latch recover): a lost disk counts as a lost member.

// errWithheld answers the vote requests of a node that has not caught up since it started
// with no state.
var errWithheld = errors.New("this member started with no raft state and has not caught up with a leader yet: it takes part in no election until then")

// amnesiaPoll is how often a node that withholds its vote checks whether it has caught up.
const amnesiaPoll = 100 * time.Millisecond

// electionRPC reports whether cmd is a request a withholding node must refuse.
func electionRPC(cmd any) bool {
	switch cmd.(type) {
	case *raft.RequestVoteRequest, *raft.RequestPreVoteRequest, *raft.TimeoutNowRequest:
		return true
	}
	return false
}

// withhold answers rpc, an election RPC to a node that withholds, with errWithheld, and
// logs it once a minute per sender.
func (f *filter) withhold(rpc raft.RPC, id, kind string) {
	f.refused.Add(1)
	if n, ok := f.withheldLog.Allow(id); ok {
		f.log.Warn("refusing an election RPC: this node started with no raft state and has not caught up with a leader yet",
			"sender", id, "rpc", kind, "suppressed", n)
	}
	rpc.Respond(emptyResponse(rpc.Command), errWithheld)
}

// RequestVote sends a vote request through the real transport, unless this node withholds.
func (f *filter) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if f.amnesiac.Load() {
		return errWithheld
	}
	return f.Transport.RequestVote(id, target, args, resp)
}

// awaitCaughtUp ends the withholding once the node is ready (Ready: a member, a leader
// known, the leader's commit index applied), checking every amnesiaPoll until stop closes.
func (n *Node) awaitCaughtUp(stop <-chan struct{}) {
	t := time.NewTicker(amnesiaPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if err := n.Ready(); err == nil {
			n.filter.amnesiac.Store(false)
			n.log.Info("caught up with the leader since starting with no raft state: taking part in elections")
			return
		}
	}
}
