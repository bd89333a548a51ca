package member

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
)

// membership implements admin.Cluster on this node: the leader changes the configuration,
// takes backups and restores them itself; a follower forwards those to the leader over the
// peer port's admin channel.
type membership struct {
	rp      *atomic.Pointer[raftnode.Node] // nil until raft is open
	mux     *peer.Mux
	id      string
	forward bool // false on the admin channel's serving side: never forward twice
	// starting: this node had no raft state at startup, so until raft is open it answers
	// State as a new member (one that may bootstrap); a node with state answers nothing
	// until raft is open, so that no peer mistakes it for a new one.
	starting bool
	locks    *cluster.Node // the lock node, for /v1/locks
	feat     *features     // the feature switch: guards additions once it is on
}

var errStarting = errors.New("this node is starting: try again in a moment")

func (m membership) node() (*raftnode.Node, error) {
	if r := m.rp.Load(); r != nil {
		return r, nil
	}
	return nil, errStarting
}

func (m membership) Members() ([]admin.Member, error) {
	r, err := m.node()
	if err != nil {
		return nil, err
	}
	var out []admin.Member
	for _, s := range r.Servers() {
		out = append(out, admin.Member{ID: s.ID, Addr: s.Addr, Suffrage: s.Suffrage})
	}
	return out, nil
}

// AddMember adds id at addr. A voter is a nonvoter until it has caught up with the log
// (raftnode.AddVoterCaughtUp), so that a node that is not running yet, or is still
// installing the state, never counts for the quorum. The leader asks whoever answers at addr
// who it is before it changes anything, and refuses when that is another member
// (admin.ErrOtherNode, 409); a follower forwards the call, and the admin channel brings the
// leader's answer back with its status.
//
// Once the cluster's feature switch is on, a server whose peer port refuses protocol
// revision 2 is refused (outcome Refused, 400): a latch without it would halt on the log.
// One that cannot be asked yet enters as a nonvoter and gets its vote only once it shows it
// serves the revision (features.admit, features.proven). The check runs under the switch's
// gate, so no server enters between the switch's probe and its commit, on the node that
// takes the request first and again on the leader it forwards to.
func (m membership) AddMember(ctx context.Context, id, addr string, voter bool) error {
	r, err := m.node()
	if err != nil {
		return err
	}
	if r.IsLeader() {
		if _, err := m.lastIndexOf(id, addr)(ctx); errors.Is(err, admin.ErrOtherNode) {
			return err
		}
	}
	release, err := m.feat.admit(ctx, id, addr)
	if err != nil {
		return err
	}
	defer release()
	if voter {
		wctx, cancel := context.WithCancel(ctx)
		if dl, ok := ctx.Deadline(); ok {
			// Answer before a forwarding follower's own deadline, so that it relays why.
			wctx, cancel = context.WithDeadline(ctx, dl.Add(-catchUpMargin))
		}
		err = r.AddVoterCaughtUp(wctx, id, addr, catchUpPoll, m.feat.proven(addr, m.lastIndexOf(id, addr)))
		cancel()
	} else {
		err = r.AddNonvoter(id, addr)
	}
	return m.orForward(ctx, err, func(ctx context.Context, conn net.Conn) error {
		return admin.CallChannel(ctx, conn, admin.ChannelRequest{Op: "add", ID: id, Addr: addr, Voter: voter})
	})
}

// How often a new voter's progress is asked for, and how long before the call's deadline the
// wait for it gives up.
const (
	catchUpPoll   = 200 * time.Millisecond
	catchUpMargin = 5 * time.Second
)

// lastIndexOf asks the node at addr (its admin channel) for its last log index; it must be
// the member id.
func (m membership) lastIndexOf(id, addr string) func(context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		st, err := probe(ctx, m.mux, addr)
		if err != nil {
			return 0, err
		}
		if st.ID != id {
			return 0, fmt.Errorf("%w: the node at %s is %q, not %q", admin.ErrOtherNode, addr, st.ID, id)
		}
		return st.LastIndex, nil
	}
}

func (m membership) RemoveMember(ctx context.Context, id string) error {
	r, err := m.node()
	if err != nil {
		return err
	}
	found := false
	for _, s := range r.Servers() {
		found = found || s.ID == id
	}
	if !found {
		return fmt.Errorf("%w: %q (see latch peers list)", admin.ErrNotFound, id)
	}
	return m.orForward(ctx, r.RemoveServer(id), func(ctx context.Context, conn net.Conn) error {
		return admin.CallChannel(ctx, conn, admin.ChannelRequest{Op: "remove", ID: id})
	})
}

func (m membership) Backup(ctx context.Context, w io.Writer) (fsm.SnapshotInfo, error) {
	r, err := m.node()
	if err != nil {
		return fsm.SnapshotInfo{}, err
	}
	// Backup refuses (not the leader) before it writes anything to w, so forwarding can
	// still write the leader's backup there.
	info, err := r.Backup(ctx, w)
	err = m.orForward(ctx, err, func(ctx context.Context, conn net.Conn) error {
		info, err = admin.CallBackup(ctx, conn, w)
		return err
	})
	return info, err
}

func (m membership) Restore(ctx context.Context, data []byte, floor uint64) (raftnode.Restored, error) {
	r, err := m.node()
	if err != nil {
		return raftnode.Restored{}, err
	}
	res, err := r.Restore(ctx, data, floor)
	err = m.orForward(ctx, err, func(ctx context.Context, conn net.Conn) error {
		res, err = admin.CallRestore(ctx, conn, data, floor)
		return err
	})
	return res, err
}

// CheckSelf asks the node at addr who it is, over the peer port: a call signed with a peer
// credential may add or promote only that node.
func (m membership) CheckSelf(ctx context.Context, id, addr string) error {
	st, err := probe(ctx, m.mux, addr)
	if err != nil {
		return fmt.Errorf("no answer from %s to check it is %q: %w", addr, id, err)
	}
	if st.ID != id {
		return fmt.Errorf("the node at %s is %q, not %q", addr, st.ID, id)
	}
	return nil
}

func (m membership) State() (admin.NodeState, error) {
	r := m.rp.Load()
	switch {
	case r != nil:
		p := r.Progress()
		return admin.NodeState{ID: m.id, LastIndex: p.LastLogIndex, Servers: r.Servers(), Leading: p.Leading, Commit: &p.CommitIndex}, nil
	case m.starting:
		return admin.NodeState{ID: m.id, Starting: true}, nil
	default:
		return admin.NodeState{}, errStarting
	}
}

// orForward runs call on a connection to the leader's admin channel when err says this
// node is not the leader; otherwise it returns err. call gets ctx with its caller marked as
// relayed by this node (admin.Relayed), so that the leader's log and audit trail name the
// caller and this node.
func (m membership) orForward(ctx context.Context, err error, call func(context.Context, net.Conn) error) error {
	if err == nil || !m.forward || !errors.Is(err, outcome.NotLeader) {
		return err
	}
	r, _ := m.node()
	id, leader := r.Leader()
	if leader == "" || id == m.id {
		return fmt.Errorf("no leader to forward to yet: %w", err)
	}
	conn, derr := m.mux.Dial(ctx, leader, peer.ChannelAdmin)
	if derr != nil {
		return fmt.Errorf("forwarding to the leader %s: %w", leader, derr)
	}
	return call(admin.Relayed(ctx, m.id), conn)
}

// List, Show and Release implement admin.Locks: the lock node answers where it leads (and
// has confirmed it still does); a follower forwards to the leader's admin channel.
func (m membership) List(ctx context.Context, prefix, after string, limit int) (admin.LockPage, error) {
	p, err := admin.LocalLocks{Node: m.locks}.List(ctx, prefix, after, limit)
	err = m.orForward(ctx, err, func(ctx context.Context, conn net.Conn) error {
		p, _, _, err = admin.CallLocks(ctx, conn, admin.ChannelRequest{Op: "locks", Prefix: prefix, After: after, Limit: limit})
		return err
	})
	return p, err
}

func (m membership) Show(ctx context.Context, key string) (admin.Lock, error) {
	lk, err := admin.LocalLocks{Node: m.locks}.Show(ctx, key)
	err = m.orForward(ctx, err, func(ctx context.Context, conn net.Conn) error {
		_, lk, _, err = admin.CallLocks(ctx, conn, admin.ChannelRequest{Op: "lock", Key: key})
		return err
	})
	return lk, err
}

func (m membership) Release(ctx context.Context, key string, token uint64) (uint64, error) {
	tok, err := admin.LocalLocks{Node: m.locks}.Release(ctx, key, token)
	err = m.orForward(ctx, err, func(ctx context.Context, conn net.Conn) error {
		_, _, tok, err = admin.CallLocks(ctx, conn, admin.ChannelRequest{Op: "force-release", Key: key, Token: token})
		return err
	})
	return tok, err
}
