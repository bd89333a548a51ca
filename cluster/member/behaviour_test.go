package member

import (
	"testing"

	"github.com/latchd/latch/cluster/behaviour"
)

// The behaviour suite against three members in this process: the suite's connections go
// through a follower, the leader and the other follower in turn.
func TestBehaviour(t *testing.T) {
	ms := startCluster(t, 3)
	leader, follower := leaderOf(t, ms)
	addrs := []string{follower.clients, leader.clients}
	for _, tm := range ms {
		if tm != leader && tm != follower {
			addrs = append(addrs, tm.clients)
		}
	}
	behaviour.Run(t, behaviour.Nodes{Clients: addrs, Count: func(*testing.T) int {
		n := 0
		for _, tm := range ms {
			n += tm.m.Node().Stats().Waiters
		}
		return n
	}})
}
