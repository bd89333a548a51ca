package cluster

import (
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// Lead makes a cluster-mode node decide requests. Call it after the new leader's barrier, so
// the applied table holds everything the old leader acknowledged. The view is rebuilt from
// that table with every lease restarted in full: a lease may end later than promised after a
// failover, never earlier.
func (n *Node) Lead() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leading.Load() {
		return
	}
	n.epoch++
	n.view.reset()
	now := n.mono(n.clock.Now())
	n.ap.read(func(t *fsm.Table) {
		if lt := t.LastToken(); lt > n.last {
			n.last = lt
		}
		n.view.held.Grow(t.Len()) // one allocation, not a heap and index grown step by step
		t.Range(func(key string, h fsm.Holder) bool {
			n.view.hold(key, h.Token, h.Lease, h.Extensions, now)
			return true
		})
	})
	n.leading.Store(true)
	n.lane.inflight = 0 // the last epoch's expiries are answered, but no longer counted
	n.disarmExpiry()
	n.armExpiry(now)
	n.log.Info("leading: lock view rebuilt, every lease restarted in full", "keys", n.view.len(), "last_token", uint64(n.last))
}

// Follow stops a cluster-mode node from deciding: waiters that were never proposed are
// answered E unavailable (a follower that forwarded them may retry them with the new
// leader); proposed ones get their entry's outcome when it arrives.
func (n *Node) Follow() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.leading.Load() {
		return
	}
	n.leading.Store(false)
	n.disarmExpiry() // a follower times no lease
	n.lane.inflight = 0
	n.epoch++
	n.failWaiters(wire.ReasonUnavailable)
	n.view.reset()
	n.log.Info("following: stopped deciding")
}
