package member

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/cluster/raftnode"
)

// registerRaftMetrics adds cluster mode's raft gauges to reg.
func registerRaftMetrics(reg prometheus.Registerer, r *raftnode.Node) {
	g := func(name, help string, f func(raftnode.Progress) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(r.Progress()) })
	}
	reg.MustRegister(
		g("latch_raft_term", "The current raft term (rises with every election).", func(p raftnode.Progress) float64 { return float64(p.Term) }),
		g("latch_raft_commit_index", "The highest raft log index this node knows is committed.", func(p raftnode.Progress) float64 { return float64(p.CommitIndex) }),
		g("latch_raft_applied_index", "The highest raft log index this node has applied to its lock table.", func(p raftnode.Progress) float64 { return float64(p.AppliedIndex) }),
		lastContact{r},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latch_raft_voters", Help: "Voters in the latest cluster configuration."},
			func() float64 { return float64(r.Voters()) }),
	)
}

// lastContact is latch_raft_last_contact_seconds: 0 on the leader, the time since the last
// contact with a leader on a follower, and absent (no sample at all, never a sentinel) on a
// node that has never heard from one.
type lastContact struct{ r *raftnode.Node }

var lastContactDesc = prometheus.NewDesc("latch_raft_last_contact_seconds",
	"Seconds since this follower last heard from a leader (0 on the leader; absent on a node that never has).", nil, nil)

func (l lastContact) Describe(ch chan<- *prometheus.Desc) { ch <- lastContactDesc }

func (l lastContact) Collect(ch chan<- prometheus.Metric) {
	p := l.r.Progress()
	switch {
	case p.Leading:
		ch <- prometheus.MustNewConstMetric(lastContactDesc, prometheus.GaugeValue, 0)
	case !p.LastContact.IsZero():
		ch <- prometheus.MustNewConstMetric(lastContactDesc, prometheus.GaugeValue, time.Since(p.LastContact).Seconds())
	}
}

// registerForwardMetrics adds the follower-to-leader forwarding gauges to reg.
func registerForwardMetrics(reg prometheus.Registerer, l *forward.Link) {
	g := func(name, help string, f func(forward.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(l.Stats()) })
	}
	reg.MustRegister(
		g("latch_forward_queued", "Requests this follower accepted for the leader and has not written to it yet.",
			func(s forward.Stats) float64 { return float64(s.Queued) }),
		g("latch_forward_inflight", "Requests this follower wrote to the leader and has no answer for yet.",
			func(s forward.Stats) float64 { return float64(s.InFlight) }),
		g("latch_forward_connections", "Open forwarding connections to the leader (old leaders' ones drain).",
			func(s forward.Stats) float64 { return float64(s.Conns) }),
	)
}

// registerFeatureMetrics adds the cluster's feature switch to reg.
func registerFeatureMetrics(reg prometheus.Registerer, f *features) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latch_cluster_leases",
		Help: "1 once protocol revision 2 (grant ages, extends) is switched on in this node's applied log, for every server of the cluster; else 0."},
		func() float64 {
			if f.leases() {
				return 1
			}
			return 0
		}))
}
