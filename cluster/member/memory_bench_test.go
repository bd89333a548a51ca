package member

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// memKeys is how many keys BenchmarkClusterMemory holds, memLease their lease in seconds:
// longer than the fill takes, so that none ends while it is measured.
const (
	memKeys  = 1_000_000
	memLease = 600
)

// BenchmarkClusterMemory compares the live heap a leader and a follower spend on 1,000,000
// held keys, on a 3-node in-process cluster: three Members (startCluster: peer ports on
// loopback, raft-wal and raft-boltdb in b.TempDir).
//
// Method, all in one process: every figure is a difference of HeapAlloc, each read after two
// runtime.GC calls, so it counts live objects only.
//   - fill: the leader's node acquires the keys (lease memLease, keys like "lock/10000123"), at most
//     window at a time, until all are granted and every FSM holds all of them;
//   - view: the leader's node then drops its view (Follow); what that frees is the view. The
//     key strings are not in it: the FSM's table owns them and the view shares them;
//   - follower: one follower is stopped and every reference to it dropped; what that frees is
//     all a follower keeps for the keys (its FSM table, raft's caches) and the little a member
//     holds whatever its keys (listeners, sessions).
//
// The leader carries what a follower carries plus its view, so leader/follower is
// (follower+view)/follower. Automatic snapshots are off so that none is taken mid-measure.
//
//	go test -run '^$' -bench ClusterMemory -benchtime 1x ./cluster/member/
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
	ms, lead := benchCluster(b, memKeys)
	fillLeases(b, lead.m.Node(), memKeys, memLease)
	appliedEverywhere(b, ms, memKeys, time.Minute)
	full := liveHeap()
	lead.m.Node().Follow()
	noView := liveHeap()
	for _, tm := range ms {
		if tm != lead {
			stop(b, tm)
			tm.m = nil // drop the last reference to its state
			break
		}
	}
	noFollower := liveHeap()
	return full - noView, noView - noFollower
}

// benchCluster starts three members (startCluster) sized for keys held keys, and waits for
// a leader: generous raft timeouts, since a leader change mid-fill would fail acquires on a
// loaded machine, automatic snapshots off so that none is taken mid-measure, and no logging
// (the shutdown noise would bury the figures; failures fail the benchmark).
func benchCluster(b testing.TB, keys int) (ms []*tmember, leader *tmember) {
	ms = startCluster(b, 3, func(cfg *Config) {
		cfg.Node.MaxKeys, cfg.Node.MaxPending = 2*keys, 2*keys
		cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, time.Second
		cfg.Raft.SnapshotThreshold, cfg.Raft.SnapshotInterval = 1<<40, time.Hour
		cfg.Logger = hclog.NewNullLogger()
	})
	leader, _ = leaderOf(b, ms)
	return ms, leader
}

// appliedEverywhere waits until every running member's FSM holds keys keys.
func appliedEverywhere(b testing.TB, ms []*tmember, keys int, within time.Duration) {
	for _, tm := range ms {
		if tm.stopped {
			continue
		}
		clustertest.Eventually(b, within, tm.m.ID()+" applied every grant", func() bool {
			return tm.m.Raft().FSM().Len() == keys
		})
	}
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
