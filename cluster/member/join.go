package member

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/raftnode"
)

// join asks the cluster behind httpAddr (any member's --http) to take this node in, until it
// is a voter or ctx ends. It joins as a nonvoter first and asks for a vote only once it has
// caught up (raftnode.Ready), so that a cluster growing under load never counts a voter that
// cannot yet acknowledge anything. A node that is already a voter (a restart, or a wiped
// member the configuration still lists) has nothing to do; a node whose own configuration
// leaves it out was removed, and does not add itself back.
func join(ctx context.Context, log hclog.Logger, r *raftnode.Node, httpAddr string, target admin.Remote, id, advertise string, secret []byte) {
	var st joinState
	for wait := time.Second; ; {
		servers := r.Servers()
		own := ""
		if i := slices.IndexFunc(servers, func(s raftnode.Server) bool { return s.ID == id }); i >= 0 {
			own = servers[i].Suffrage
		}
		var err error
		pause := 200 * time.Millisecond
		listed := func() (string, error) {
			suffrage, ms, err := clusterListing(ctx, target, id)
			if err == nil && len(servers) == 0 {
				r.ExpectPeers(membersAsPeers(ms)) // before the leader first speaks to this node
			}
			return suffrage, err
		}
		switch st.next(own, len(servers) > 0, listed, r.Ready() == nil) {
		case joinJoined:
			log.Info("joined the cluster", "via", httpAddr, "id", id, "addr", advertise)
			return
		case joinMember:
			log.Info("already a member: not joining again", "join", httpAddr)
			return
		case joinRemoved:
			log.Warn("this node was removed from the cluster (its configuration and the cluster's list leave it out); "+
				"not joining again (wipe --data-dir to join afresh)", "join", httpAddr, "id", id)
			return
		case joinListed:
			log.Info("listed by the cluster; catching up", "via", httpAddr, "id", id)
		case joinAsk:
			if err = postPeer(ctx, target, admin.AddRequest{ID: id, Addr: advertise, Nonvoter: true}, secret); err == nil {
				st.asked = true
				log.Info("added to the cluster as a nonvoter; catching up before asking for a vote", "via", httpAddr, "id", id)
			}
		case joinCatchingUp:
			log.Info("catching up before asking for a vote", "reason", r.Ready())
		case joinPromote:
			if err = postPeer(ctx, target, admin.AddRequest{ID: id, Addr: advertise}, secret); err == nil {
				st.asked, st.promoted = true, time.Now()
			}
		case joinFailed:
			err = st.err
		}
		if err != nil {
			log.Warn("join failed; retrying", "via", httpAddr, "error", err, "in", wait)
			pause, wait = wait, min(2*wait, 10*time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// joinState is what the join loop remembers between rounds; next decides each round.
type joinState struct {
	// seen: this node has found itself in its configuration. Missing from it after that
	// means it was removed. asked: its request to be added went through in this run; until
	// the entry that adds it arrives (the log, or a snapshot older than the add, may not have
	// it yet) it waits and never asks again, so a removal in between is not undone.
	seen, asked bool
	waiting     bool      // "catching up" was said once
	promoted    time.Time // when the last request for a vote went through
	err         error     // joinFailed: why
}

// The join loop's actions.
const (
	joinWait       = iota // nothing to do this round
	joinJoined            // a voter after asking: done
	joinMember            // a voter already: done
	joinRemoved           // removed from the cluster: stop, never add itself back
	joinListed            // the cluster lists it while its own configuration does not yet
	joinAsk               // ask to be added as a nonvoter
	joinCatchingUp        // a nonvoter not caught up yet (said once)
	joinPromote           // a nonvoter caught up: ask for a vote
	joinFailed            // asking the cluster failed: retry
)

// next decides one round. own is this node's suffrage in its own configuration ("" if it is
// not there), hasConfig whether that configuration lists anyone, listed asks the cluster
// (only when needed), ready whether this node has caught up.
func (st *joinState) next(own string, hasConfig bool, listed func() (string, error), ready bool) int {
	st.seen = st.seen || own != ""
	switch {
	case own == "voter" && st.asked:
		return joinJoined
	case own == "voter":
		return joinMember
	case own == "" && st.seen:
		return joinRemoved
	case own == "" && st.asked:
		return joinWait
	case own == "":
		// A new node, a removed one restarted, or one restarted while it caught up (its
		// configuration older than its addition): the cluster's own list tells them apart.
		l, err := listed()
		switch {
		case err != nil:
			st.err = err
			return joinFailed
		case l != "":
			st.asked = true
			return joinListed
		case hasConfig:
			return joinRemoved
		}
		return joinAsk
	case !ready:
		if st.waiting {
			return joinWait
		}
		st.waiting = true
		return joinCatchingUp
	case time.Since(st.promoted) < 5*time.Second:
		return joinWait // the vote was granted; the configuration that says so is on its way
	}
	return joinPromote
}

// clusterListing returns id's suffrage in the member list of the cluster behind a ("" if it
// is not listed), and the list.
func clusterListing(ctx context.Context, a admin.Remote, id string) (string, []admin.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	ms, err := a.Members(ctx)
	if err != nil {
		return "", nil, err
	}
	for _, m := range ms {
		if m.ID == id {
			return m.Suffrage, ms, nil
		}
	}
	return "", ms, nil
}

// membersAsPeers returns the voters and nonvoters of ms.
func membersAsPeers(ms []admin.Member) []raftnode.Peer {
	var out []raftnode.Peer
	for _, m := range ms {
		if m.Suffrage == "voter" || m.Suffrage == "nonvoter" {
			out = append(out, raftnode.Peer{ID: m.ID, Addr: m.Addr})
		}
	}
	return out
}

// postPeer sends a signed POST /v1/peers to the node at a.
func postPeer(ctx context.Context, a admin.Remote, req admin.AddRequest, secret []byte) error {
	body, _ := json.Marshal(req)
	return a.Call(ctx, http.MethodPost, "/v1/peers", body, secret, nil)
}
