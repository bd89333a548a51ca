package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// memKeys is how many keys BenchmarkClusterMemory holds.
const memKeys = 1_000_000

// BenchmarkClusterMemory compares the live heap a leader and a follower spend on 1,000,000
// held keys, on a 3-node in-process cluster: a cluster.Node in cluster mode on each of three
// raftnode.Nodes (loopback TCP transport, raft-wal and raft-boltdb in b.TempDir).
//
// Method, all in one process: every figure is a difference of HeapAlloc, each read after two
// runtime.GC calls, so it counts live objects only.
//   - fill: the leader's node acquires the keys (lease 30 s, keys like "lock/10000123"), at most
//     window at a time, until all are granted and every FSM holds all of them;
//   - view: the leader's node then drops its view (Follow); what that frees is the view. The
//     key strings are not in it: the FSM's table owns them and the view shares them;
//   - follower: one follower's raft node is shut down and every reference to it dropped; what
//     that frees is all a follower keeps for the keys (its FSM table, raft's caches).
//
// The leader carries what a follower carries plus its view, so leader/follower is
// (follower+view)/follower. Automatic snapshots are off so that none is taken mid-measure.
//
//	go test -run '^$' -bench ClusterMemory -benchtime 1x ./cluster/
func BenchmarkClusterMemory(b *testing.B) {
	for range b.N {
		view, follower := clusterMemory(b)
		b.ReportMetric(view/memKeys, "view-B/key")
		b.ReportMetric(follower/memKeys, "follower-B/key")
		b.ReportMetric((follower+view)/memKeys, "leader-B/key")
		b.ReportMetric((follower+view)/follower, "leader/follower")
	}
}

func liveHeap() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

func clusterMemory(b *testing.B) (view, follower float64) {
	ms := startMembers(b)
	lead := ms.leader(b)
	fillLeases(b, lead.node, memKeys, 30)
	for _, m := range ms {
		clustertest.Eventually(b, time.Minute, m.id+" applied every grant", func() bool {
			return m.raft.FSM().Len() == memKeys
		})
	}
	full := liveHeap()
	lead.node.Follow()
	noView := liveHeap()
	var f *member
	for _, m := range ms {
		if m != lead {
			f = m
			break
		}
	}
	ms.stop(b, f)
	noFollower := liveHeap()
	return full - noView, noView - noFollower
}

// member is one cluster node of the benchmark: raft, and the lock node on top of it.
type member struct {
	id    string
	raft  *raftnode.Node
	node  *cluster.Node
	state atomic.Pointer[fsm.FSM]
	rn    atomic.Pointer[raftnode.Node]
}

type members []*member

// Submit implements cluster.Proposer with raftnode's outcomes mapped to the node's.
func (m *member) Submit(cmd fsm.Command, done func(fsm.Result, error)) {
	r := m.rn.Load()
	if r == nil {
		go done(fsm.Result{}, cluster.ErrNotApplied)
		return
	}
	r.Submit(cmd, func(res fsm.Result, err error) { done(res, outcome(err)) })
}

// Confirm implements cluster.Confirmer.
func (m *member) Confirm(done func(error)) {
	r := m.rn.Load()
	if r == nil {
		go done(cluster.ErrNotApplied)
		return
	}
	r.Confirm(func(err error) { done(outcome(err)) })
}

// SubmitGroup implements cluster.GroupProposer.
func (m *member) SubmitGroup(ps []cluster.Proposal) {
	r := m.rn.Load()
	if r == nil {
		for _, p := range ps {
			m.Submit(p.Cmd, p.Done)
		}
		return
	}
	rps := make([]raftnode.Proposal, len(ps))
	for i, p := range ps {
		done := p.Done
		rps[i] = raftnode.Proposal{Cmd: p.Cmd, Done: func(res fsm.Result, err error) { done(res, outcome(err)) }}
	}
	r.SubmitGroup(rps...)
}

func outcome(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raftnode.ErrNotApplied):
		return fmt.Errorf("%w: %w", cluster.ErrNotApplied, err)
	}
	return fmt.Errorf("%w: %w", cluster.ErrMaybeApplied, err)
}

// Read implements cluster.StateReader.
func (m *member) Read(fn func(*fsm.Table)) {
	if f := m.state.Load(); f != nil {
		f.Read(fn)
	}
}

func startMembers(b testing.TB) members {
	log := hclog.NewNullLogger() // its shutdown noise would bury the figures; failures fail the benchmark
	ms := make(members, 3)
	trs := make([]*raft.NetworkTransport, 3)
	var peers []raftnode.Peer
	for i := range ms {
		tr, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 10*time.Second, log.Named("raft-net"))
		if err != nil {
			b.Fatal(err)
		}
		trs[i] = tr
		ms[i] = &member{id: fmt.Sprintf("node-%d", i)}
		peers = append(peers, raftnode.Peer{ID: ms[i].id, Addr: string(tr.LocalAddr())})
	}
	b.Cleanup(func() {
		for _, m := range ms {
			ms.stop(b, m)
		}
	})
	for i, m := range ms {
		ncfg := cluster.DefaultConfig()
		ncfg.MaxKeys, ncfg.MaxPending = 2*memKeys, 2*memKeys
		ncfg.Replicated = &cluster.Replicated{Propose: m, State: m, Confirm: m}
		n, err := cluster.NewNode(ncfg)
		if err != nil {
			b.Fatal(err)
		}
		m.node = n
		rcfg := raftnode.DefaultConfig()
		rcfg.ID, rcfg.DataDir, rcfg.Transport = m.id, filepath.Join(b.TempDir(), "data"), trs[i]
		rcfg.InitialCluster, rcfg.Logger = peers, log.Named(m.id)
		// Generous timeouts: a leader change mid-fill would fail acquires on a loaded machine.
		rcfg.HeartbeatTimeout, rcfg.ElectionTimeout, rcfg.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, time.Second
		rcfg.SnapshotThreshold, rcfg.SnapshotInterval = 1<<40, time.Hour
		rcfg.OnLeader = func(f *fsm.FSM) { m.state.Store(f); n.Lead() }
		rcfg.OnFollower = n.Follow
		r, err := raftnode.Open(rcfg)
		if err != nil {
			b.Fatal(err)
		}
		m.raft = r
		m.rn.Store(r)
		m.state.Store(r.FSM())
	}
	return ms
}

func (ms members) leader(b testing.TB) *member {
	var l *member
	clustertest.Eventually(b, 30*time.Second, "a leading node", func() bool {
		for _, m := range ms {
			if m.node != nil && m.node.Leading() {
				l = m
				return true
			}
		}
		return false
	})
	return l
}

// stop shuts m's raft node down and drops every reference to its state.
func (ms members) stop(b testing.TB, m *member) {
	if m.raft == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.raft.Shutdown(ctx); err != nil {
		b.Errorf("shutdown %s: %v", m.id, err)
	}
	m.raft, m.node = nil, nil
	m.rn.Store(nil)
	m.state.Store(nil)
}

// window bounds the acquires in flight while filling: well below raftnode's MaxQueue.
const window = 4096

// slots is a Replier that frees one window slot per answer and counts grants and failures.
type slots struct {
	free           chan struct{}
	grants, failed atomic.Int64
	first          atomic.Value
}

func (s *slots) Reply(r wire.Response) {
	if r.Op == wire.OpAcquire {
		s.grants.Add(1)
	} else if s.failed.Add(1) == 1 {
		s.first.Store(r)
	}
	<-s.free // never blocks: every acquire took a slot before it was made
}
