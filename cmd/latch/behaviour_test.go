package main

import (
	"testing"

	"github.com/latchd/latch/cluster/behaviour"
	"github.com/latchd/latch/cluster/clustertest"
)

// The behaviour suite against real processes: three `latch server --mode cluster` processes
// (connections through followers and the leader in turn) and one single-mode process.
func TestBehaviourProcesses(t *testing.T) {
	clustertest.Slow(t, "starts four processes")
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		tc := startTestCluster(t, 3)
		l := tc.leader() // a leader, and every node ready
		var addrs []string
		for i := range tc.procs {
			addrs = append(addrs, tc.procs[(l+1+i)%len(tc.procs)].listen) // a follower first
		}
		behaviour.Run(t, behaviour.Nodes{Clients: addrs, Count: func(t *testing.T) int { return waiters(t, tc.procs...) }})
	})
	t.Run("single", func(t *testing.T) {
		t.Parallel()
		p := startServer(t, nil)
		behaviour.Run(t, behaviour.Nodes{Clients: []string{p.listen}, Count: func(t *testing.T) int { return waiters(t, p) }})
	})
}

// waiters sums the latch_waiters gauge of the processes' /metrics.
func waiters(t *testing.T, ps ...*proc) int {
	t.Helper()
	n := 0
	for _, p := range ps {
		v := metric(p.http, "latch_waiters")
		if v < 0 {
			t.Fatalf("no latch_waiters gauge in %s/metrics", p.http)
		}
		n += int(v)
	}
	return n
}
