package main

import (
	"testing"

	"github.com/latchd/latch/cluster/clustertest"
)

// Issue 21, item 2, in cluster mode: once the cluster has switched revision 2 on, a waiter
// granted after waiting keeps its lease (the leader's grant age, relayed over the revised
// forward channel unchanged), and extends, through a follower and at the leader.
// waiterKeepsItsLease (leases_test.go) is the same check as in single mode.
func TestWaiterKeepsItsLeaseInACluster(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	tc := startTestCluster(t, 3)
	l, _ := tc.agreed(mixedRecovery)
	tc.awaitLeasesOn()
	f := (l + 1) % len(tc.procs)
	t.Run("waiter at a follower", func(t *testing.T) {
		waiterKeepsItsLease(t, "lease/follower", []string{tc.procs[l].listen}, []string{tc.procs[f].listen})
	})
	t.Run("waiter at the leader", func(t *testing.T) {
		waiterKeepsItsLease(t, "lease/leader", []string{tc.procs[f].listen}, []string{tc.procs[l].listen})
	})
}
