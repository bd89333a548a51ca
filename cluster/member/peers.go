package member

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/cluster/raftnode"
)

// advertised is a peer address that may be a DNS name.
type advertised string

func (a advertised) Network() string { return "tcp" }
func (a advertised) String() string  { return string(a) }

// raftAdmission admits to the Raft channel the peers that state the identity of a voter or
// nonvoter of this node's configuration (any peer while it has none: it waits to be added),
// and, with legacy, peers of an older latch that state none.
func raftAdmission(rp *atomic.Pointer[raftnode.Node], legacy bool) peer.Admission {
	return peer.Admission{
		Legacy: legacy,
		Check: func(id peer.Identity) error {
			r := rp.Load()
			if r == nil {
				return peer.ErrNotReady
			}
			return r.CheckPeer(id.ID, id.Addr)
		},
	}
}

// vouch asks the given members, one after another over the admin channel, whether their
// Raft configuration has id as a voter or nonvoter, and returns the address the first that
// does has for it (raftnode.Config.Vouch). A member answers for itself only: an answer from
// a node with another ID at that address is ignored.
func vouch(mux *peer.Mux) func(ctx context.Context, id string, members []raftnode.Peer) (string, bool) {
	return func(ctx context.Context, id string, members []raftnode.Peer) (string, bool) {
		for _, m := range members {
			st, err := probe(ctx, mux, m.Addr)
			if err != nil || st.ID != m.ID {
				continue
			}
			for _, s := range st.Servers {
				if s.ID == id && (s.Suffrage == "voter" || s.Suffrage == "nonvoter") {
					return s.Addr, true
				}
			}
		}
		return "", false
	}
}

// leaderCommit asks the leader over the admin channel for its commit index
// (raftnode.Config.LeaderCommit). The node at addr must be id and say it leads. A latch older
// than the answer's commit index (a rolling upgrade) answers with its last log index only:
// that is at least its commit index, so a follower that has applied it has caught up too.
func leaderCommit(mux *peer.Mux) func(ctx context.Context, id, addr string) (uint64, error) {
	return func(ctx context.Context, id, addr string) (uint64, error) {
		st, err := probe(ctx, mux, addr)
		switch {
		case err != nil:
			return 0, err
		case st.ID != id:
			return 0, fmt.Errorf("the node at %s is %q, not %q", addr, st.ID, id)
		case st.Commit == nil:
			return st.LastIndex, nil // an older latch
		case !st.Leading:
			return 0, fmt.Errorf("%s does not lead (yet, or any more)", id)
		}
		return *st.Commit, nil
	}
}

// voteQuarantine keeps a node without raft state out of elections for a while before raft
// starts. Such a node, when it does not found a cluster, may be a member whose disk was lost:
// it has forgotten the vote it may have cast in the current term, and voting again in that
// term could let two candidates win it. A candidate's election lasts at most twice the
// election timeout, so once that has passed since this process started (which was after any
// vote it lost), every vote it casts is in a later term.
func voteQuarantine(log hclog.Logger, electionTimeout time.Duration) {
	wait := 2*electionTimeout + time.Second
	log.Info("no raft state: waiting before taking part in elections, so that a vote cast before the data was lost cannot be cast twice", "wait", wait)
	time.Sleep(wait)
}
