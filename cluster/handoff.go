package cluster

import "github.com/latchd/latch/fsm"

// holderGone runs after ks's holder is gone (released or expired): the next live waiter is
// granted in FIFO order; without one the key leaves the view.
func (n *Node) holderGone(ks *keyState, now int64) {
	n.view.heap.Remove(&ks.item)
	ks.item.Token, ks.ending = 0, false
	n.settle(ks, now)
}

// settle drops ks from the view when it has no holder and no grant in flight, after lining
// up the next waiter.
func (n *Node) settle(ks *keyState, now int64) {
	if ks.item.Token != 0 || ks.granting {
		return
	}
	n.grantNext(ks, now)
	if !ks.granting && ks.item.Token == 0 {
		if n.view.keys[ks.item.Key] == ks {
			delete(n.view.keys, ks.item.Key)
		}
	}
}

// grantNext proposes the head live waiter's acquire, unless one is in flight already. In cluster
// mode it is called right after a release or expiry is proposed, so the grant follows in the
// log without waiting for the release's result; in single mode the release has been applied.
func (n *Node) grantNext(ks *keyState, now int64) {
	if ks.granting || ks.q == nil || (ks.item.Token != 0 && !ks.ending) || n.last >= fsm.MaxToken {
		return
	}
	for {
		w := ks.q.pop()
		if w == nil {
			ks.q = nil
			return
		}
		if w.done {
			continue
		}
		if w.c.gone {
			n.retire(w, false)
			continue
		}
		if ks.q.empty() {
			ks.q = nil
		}
		w.proposed, ks.granting = true, true
		n.proposeAcquire([]byte(ks.item.Key), acqOp{c: w.c, owner: w.owner, lease: w.lease, readAt: w.readAt, epoch: n.epoch, w: w})
		return
	}
}
