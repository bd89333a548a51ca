package cluster

import "github.com/latchd/latch/fsm"

// holderGone runs after name's holder is gone (released or expired): the next live waiter is
// granted in FIFO order; without one the key leaves the view.
func (n *Node) holderGone(name string, now int64) {
	n.view.drop(name)
	if ks := n.view.keys[name]; ks != nil {
		n.settle(ks, now)
	}
}

// settle drops ks from the view when its key has no holder and no grant in flight, after
// lining up the next waiter.
func (n *Node) settle(ks *keyState, now int64) {
	if _, held := n.view.held.Lookup(ks.key); held || ks.granting {
		return
	}
	n.grantNext(ks.key, now)
	if _, held := n.view.held.Lookup(ks.key); !held && !ks.granting {
		n.view.forget(ks)
	}
}

// grantNext proposes the head live waiter's acquire of name, unless one is in flight already
// or the key has a holder no release or expiry is out for. In cluster mode it is called right
// after a release or expiry is proposed, so the grant follows in the log without waiting for
// the release's result; in single mode the release has been applied.
func (n *Node) grantNext(name string, now int64) {
	ks := n.view.keys[name]
	if ks == nil || ks.granting || ks.q == nil || n.last >= fsm.MaxToken {
		return
	}
	if h, held := n.view.held.Lookup(name); held && !h.Parked() {
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
		if w.c.ended.Load() {
			n.retire(w, false)
			continue
		}
		if ks.q.empty() {
			ks.q = nil
		}
		w.proposed, ks.granting = true, true
		n.proposeAcquire([]byte(ks.key), acqOp{c: w.c, owner: w.owner, lease: w.lease, readAt: w.readAt, epoch: n.epoch, w: w}, now)
		return
	}
}
