package cluster

import (
	"time"

	"github.com/latchd/latch/expiry"
	"github.com/latchd/latch/fsm"
)

// keyState is the view of one key: the lease deadline of the current holder (an item of the
// expiry heap, whose Token is the holder's token; 0 while it has none) and the FIFO of
// acquires waiting for it.
type keyState struct {
	item     expiry.Item
	q        *queue // nil until someone waits
	granting bool   // a waiter's acquire is proposed behind a release or expiry
	ending   bool   // a release or expiry of the current holder is proposed
}

// view is what the deciding node (the leader, or a single-mode server) knows of the keys it
// decides: every held key with its holder's token and lease deadline, and the keys that have
// waiters. Its fields are guarded by the node's mutex.
type view struct {
	keys map[string]*keyState
	heap expiry.Heap // the holders' lease deadlines, soonest first
}

// reset empties the view (at a leadership change).
func (v *view) reset() {
	v.keys = make(map[string]*keyState)
	v.heap.Reset()
}

// hold makes tok the holder of ks (under key, which ks is filed under in v) with its lease
// counted in full from now. It is the one way a holder enters the view: a grant, a holder
// the view missed, a correction from the log, and every holder at a new leader's start.
func (v *view) hold(ks *keyState, key string, tok fsm.Token, lease uint16, now int64) {
	v.heap.Remove(&ks.item)
	ks.item.Key, ks.item.Token, ks.ending = key, uint64(tok), false
	ks.item.Deadline = now + int64(lease)*int64(time.Second)
	v.heap.Push(&ks.item)
}

// state returns ks for key, filing a new one (or reuse, when not nil) under it first.
func (v *view) state(key string, reuse *keyState) *keyState {
	ks := v.keys[key]
	if ks == nil {
		ks = reuse
		if ks == nil {
			ks = &keyState{}
		}
		v.keys[key] = ks
	}
	return ks
}

// track records a grant in the view. w is the waiter it went to (its key state is reused), or
// nil.
func (n *Node) track(key string, tok fsm.Token, lease uint16, now int64, w *waiter) {
	var reuse *keyState
	if w != nil {
		reuse = w.ks
	}
	n.view.hold(n.view.state(key, reuse), key, tok, lease, now)
}

// adopt puts a holder the view did not know into it, with its lease restarted in full.
func (n *Node) adopt(key string, h fsm.Holder, now int64) *keyState {
	ks := n.view.state(key, nil)
	n.view.hold(ks, key, h.Token, h.Lease, now)
	return ks
}

// resync corrects ks after the log answered that the view's holder does not hold the key. h is
// the holder the log has: none frees the key (and lines up the next waiter); another is
// held with its lease restarted in full, as adopt does, so no lease ends early.
func (n *Node) resync(ks *keyState, h fsm.Holder, now int64) {
	n.log.Warn("lock view corrected from the log", "key", ks.item.Key, "view_token", ks.item.Token, "log_token", uint64(h.Token))
	if h.Token == 0 {
		n.holderGone(ks, now)
		return
	}
	n.view.hold(ks, ks.item.Key, h.Token, h.Lease, now)
	if h.Token > n.last {
		n.last = h.Token
	}
}
