package fsm

import (
	"bytes"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/rafttest"
)

// The in-process raft cluster below runs raw raft (not raftnode) with the FSM, on
// rafttest's in-memory network and real stores in t.TempDir, instead of
// raft.MakeClusterCustom: that helper needs a *testing.T, replaces Config.Logger with its own
// t.Log logger, and keeps its stores in os.MkdirTemp directories. Here raft logs go to
// hclog.NewNullLogger(), and every node can be restarted on its own stores.

type testNode struct {
	id     raft.ServerID
	addr   raft.ServerAddress
	net    *rafttest.Net
	stores *rafttest.Stores
	fsm    *FSM
	r      *raft.Raft

	restores atomic.Int32 // successful Restore calls on this node's FSMs
}

// countingFSM counts restores; everything else is the FSM's own.
type countingFSM struct {
	*FSM
	n *atomic.Int32
}

func (c countingFSM) Restore(rc io.ReadCloser) error {
	err := c.FSM.Restore(rc)
	if err == nil {
		c.n.Add(1)
	}
	return err
}

func testRaftConfig(id raft.ServerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.Logger = hclog.NewNullLogger()
	// Faster than the defaults, slow enough that a loaded machine running
	// -race does not see spurious elections.
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.MaxAppendEntries = 16
	// Snapshots only when the test asks, and then truncate hard so that a
	// node added later must be sent a snapshot.
	c.SnapshotInterval = time.Hour
	c.SnapshotThreshold = 1 << 40
	c.TrailingLogs = 2
	return c
}

// start (re)starts n's raft on its stores with a fresh FSM and a fresh
// transport at its address, connected both ways to the others.
func (n *testNode) start(t *testing.T) {
	t.Helper()
	n.fsm = newFSM(t, 0)
	s := n.stores
	r, err := raft.NewRaft(testRaftConfig(n.id), countingFSM{n.fsm, &n.restores}, s.Log, s.Log, s.Snaps, n.net.Transport(n.addr))
	if err != nil {
		t.Fatalf("NewRaft %s: %v", n.id, err)
	}
	n.r = r
}

func (n *testNode) stop(t *testing.T) {
	t.Helper()
	if n.r == nil {
		return
	}
	if err := n.r.Shutdown().Error(); err != nil {
		t.Errorf("shutdown %s: %v", n.id, err)
	}
	n.net.Down(n.addr)
	n.r = nil
}

func newTestNode(t *testing.T, net *rafttest.Net, i int) *testNode {
	return &testNode{
		id:     raft.ServerID(fmt.Sprintf("node%d", i)),
		addr:   raft.ServerAddress(fmt.Sprintf("inmem-node%d", i)),
		net:    net,
		stores: rafttest.NewStores(t),
	}
}

// newTestCluster bootstraps n voters and starts them.
func newTestCluster(t *testing.T, n int) []*testNode {
	t.Helper()
	net := &rafttest.Net{}
	nodes := make([]*testNode, n)
	var conf raft.Configuration
	for i := range nodes {
		nodes[i] = newTestNode(t, net, i)
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: nodes[i].id, Address: nodes[i].addr})
	}
	for _, nd := range nodes {
		_, tr := raft.NewInmemTransport(nd.addr)
		s := nd.stores
		if err := raft.BootstrapCluster(testRaftConfig(nd.id), s.Log, s.Log, s.Snaps, tr, conf); err != nil {
			t.Fatalf("bootstrap %s: %v", nd.id, err)
		}
	}
	for _, nd := range nodes {
		nd.start(t)
	}
	return nodes
}

// waitFor polls cond until it holds, failing the test after clustertest.Bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Bound, what, cond)
}

func leaderOf(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	var leader *testNode
	waitFor(t, "a leader", func() bool {
		leader = nil
		for _, n := range nodes {
			if n.r != nil && n.r.State() == raft.Leader {
				if leader != nil {
					return false
				}
				leader = n
			}
		}
		return leader != nil
	})
	return leader
}

// propose applies one batch through the leader and returns its results. It
// bounds the wait itself: an ApplyFuture can block forever (hashicorp/raft
// issue 498).
func propose(t *testing.T, leader *testNode, cmds ...Command) []Result {
	t.Helper()
	data, err := AppendBatch(nil, cmds)
	if err != nil {
		t.Fatal(err)
	}
	f := leader.r.Apply(data, clustertest.Bound)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("apply on %s: %v", leader.id, err)
		}
	case <-time.After(clustertest.Bound):
		t.Fatalf("apply on %s did not finish in %v", leader.id, clustertest.Bound)
	}
	res := results(t, f.Response())
	if len(res) != len(cmds) {
		t.Fatalf("%d results for %d commands", len(res), len(cmds))
	}
	return res
}

// converged waits until every node's FSM has applied what the leader's has,
// then checks that they hold byte-identical state.
func converged(t *testing.T, leader *testNode, nodes []*testNode) state {
	t.Helper()
	want := stateOf(t, leader.fsm)
	for _, n := range nodes {
		waitFor(t, fmt.Sprintf("%s to apply index %d", n.id, want.applied), func() bool {
			return n.fsm.AppliedIndex() >= want.applied
		})
		if got := stateOf(t, n.fsm); !sameState(got, want) {
			t.Fatalf("%s has %v, leader %s has %v", n.id, got, leader.id, want)
		}
	}
	return want
}

func wantKinds(t *testing.T, res []Result, kinds ...ResultKind) {
	t.Helper()
	for i, k := range kinds {
		if res[i].Kind != k {
			t.Fatalf("result %d = %+v, want %v", i, res[i], k)
		}
	}
}

// TestRaftClusterConverges runs the FSM under real hashicorp/raft on the
// in-memory transport: batches through the leader, convergence of every
// replica to byte-identical state, forced snapshots, a node added later that
// must be sent a snapshot (InstallSnapshot -> Restore), and a follower
// restarted on its own stores with a fresh FSM (Restore at startup, then
// replay of the log after the snapshot).
func TestRaftClusterConverges(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	nodes := newTestCluster(t, 3)
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	leader := leaderOf(t, nodes)

	// Bootstrap's --token-floor goes through the log.
	wantKinds(t, propose(t, leader, flr(1000)), Floored)

	var keys []Command
	for i := range 40 {
		keys = append(keys, acq(fmt.Sprintf("lock/%02d", i), uint16(10+i)))
	}
	for i, r := range propose(t, leader, keys...) {
		if r.Kind != Granted || r.Token != Token(1001+i) {
			t.Fatalf("grant %d: %+v, want token %d", i, r, 1001+i)
		}
	}
	// One entry releases and grants to the next waiter; an expiry too.
	res := propose(t, leader,
		rel("lock/00", 1001), acq("lock/00", 60),
		exp("lock/01", 1002), acq("lock/01", 60),
		exp("lock/01", 1002), acq("lock/02", 5), rel("lock/03", 9),
	)
	wantKinds(t, res, Released, Granted, Expired, Granted, Stale, Held, NotHeld)
	if res[1].Token != 1041 || res[3].Token != 1042 {
		t.Fatalf("next waiters got %d and %d, want 1041 and 1042", res[1].Token, res[3].Token)
	}
	last := Token(1042)
	// A stream of small batches, many entries in flight at once.
	for i := range 30 {
		k := fmt.Sprintf("lock/%02d", 10+i%30)
		h, _ := leader.fsm.Holder([]byte(k))
		res := propose(t, leader, rel(k, h.Token), acq(k, 1), acq("busy", 1))
		wantKinds(t, res, Released, Granted)
		if res[1].Token != last+1 {
			t.Fatalf("batch %d granted %d after %d", i, res[1].Token, last)
		}
		last = res[1].Token
		if res[2].Kind == Granted {
			last = res[2].Token
		}
	}
	converged(t, leader, nodes)

	// Snapshot every node (each snapshots its own FSM), then keep going so
	// that there is log after the snapshot.
	for _, n := range nodes {
		if err := n.r.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot %s: %v", n.id, err)
		}
	}
	for i := range 5 {
		propose(t, leader, acq(fmt.Sprintf("after-snap/%d", i), 7), exp("lock/05", 1006))
	}
	converged(t, leader, nodes)

	// A fourth node joins after the log before the snapshot was truncated:
	// raft must send it the leader's snapshot.
	n4 := newTestNode(t, nodes[0].net, 3)
	n4.start(t)
	nodes = append(nodes, n4)
	if err := leader.r.AddVoter(n4.id, n4.addr, 0, clustertest.Bound).Error(); err != nil {
		t.Fatalf("AddVoter: %v", err)
	}
	wantKinds(t, propose(t, leader, acq("after-join", 1)), Granted)
	converged(t, leader, nodes)
	if metas, _ := n4.stores.Snaps.List(); len(metas) != 1 || n4.restores.Load() != 1 {
		t.Fatalf("%s holds %d snapshots and restored %d, want the one it was sent",
			n4.id, len(metas), n4.restores.Load())
	}

	// Restart a follower with a fresh, empty FSM on its own stores.
	var follower *testNode
	for _, n := range nodes[:3] {
		if n != leader {
			follower = n
			break
		}
	}
	follower.stop(t)
	wantKinds(t, propose(t, leader, acq("while-down", 1), rel("after-join", 0)), Granted, NotHeld)
	follower.start(t)
	if got := follower.restores.Load(); got != 1 {
		t.Fatalf("%s restored %d snapshots at startup, want 1", follower.id, got)
	}
	wantKinds(t, propose(t, leader, acq("after-restart", 1)), Granted)
	final := converged(t, leader, nodes)
	if final.last != leader.fsm.LastToken() || len(final.held) != leader.fsm.Len() {
		t.Fatalf("final state %v disagrees with the leader's readers", final)
	}

	// Every node writes the same snapshot bytes for the same state.
	var first []byte
	for _, n := range nodes {
		data := persist(t, n.fsm)
		if first == nil {
			first = data
		} else if !bytes.Equal(data, first) {
			t.Fatalf("%s persists different snapshot bytes", n.id)
		}
	}
}
