package cluster

import (
	"time"

	"github.com/latchd/latch/expiry"
	"github.com/latchd/latch/fsm"
)

// The view keeps holders' tokens in an expiry.Heap, whose entries carry tokens below 2^63:
// this fails to compile if the lock table's largest token outgrows it.
const _ = expiry.MaxToken - uint64(fsm.MaxToken)

// tokenOf is the fencing token of a holder in the view.
func tokenOf(h expiry.Entry) fsm.Token { return fsm.Token(h.Token()) }

// keyState is what the view keeps of a key besides its holder: the FIFO of acquires waiting
// for it, and whether one of them is being granted. Only a key with waiters, or a waiter's
// grant in flight, has one.
type keyState struct {
	key      string
	q        *queue // nil until someone waits
	granting bool   // a waiter's acquire is proposed behind a release or expiry
}

// view is what the deciding node (the leader, or a single-mode server) knows of the keys it
// decides: every held key with its holder's token and lease deadline (held), and the keys
// that have waiters (keys). A key is in the view while it is in either. A holder is parked
// while a release or an expiry of it is proposed. Its fields are guarded by the node's mutex.
//
// It keeps no copy of what the lock table holds beyond that: the key strings are the table's,
// the lease is read from it only to count a deadline. The holder's token is kept because in
// cluster mode the view learns a command's result after the table applied it: for a key
// whose release is in the log the table may already show the next holder (or none) while
// the view still times the lease it granted, and an expiry must name that token.
type view struct {
	held expiry.Heap
	keys map[string]*keyState
	bare int // keys in keys without a holder in held
}

// reset empties the view (at a leadership change).
func (v *view) reset() {
	v.held = expiry.NewHeap()
	v.keys = make(map[string]*keyState)
	v.bare = 0
}

// len is the number of keys in the view.
func (v *view) len() int { return v.held.Len() + v.bare }

// hold makes tok the holder of key with its lease counted in full from now. It is the one way
// a holder enters the view: a grant, a holder the view missed, a correction from the log, and
// every holder at a new leader's start. key should be the table's own string.
func (v *view) hold(key string, tok fsm.Token, lease uint16, now int64) {
	if v.held.Set(key, uint64(tok), now+int64(lease)*int64(time.Second)) && v.keys[key] != nil {
		v.bare--
	}
}

// drop forgets key's holder.
func (v *view) drop(key string) {
	if v.held.Remove(key) && v.keys[key] != nil {
		v.bare++
	}
}

// name returns the view's string for key (its holder's, or its key state's) if key is in the
// view.
func (v *view) name(key []byte) (string, bool) {
	if h, ok := v.held.Get(key); ok {
		return h.Key, true
	}
	if ks := v.keys[string(key)]; ks != nil {
		return ks.key, true
	}
	return "", false
}

// state returns key's key state, filing a new one first if it has none.
func (v *view) state(key string) *keyState {
	ks := v.keys[key]
	if ks == nil {
		ks = &keyState{key: key}
		v.keys[key] = ks
		if _, held := v.held.Lookup(key); !held {
			v.bare++
		}
	}
	return ks
}

// forget drops ks from the view, if it is still filed there.
func (v *view) forget(ks *keyState) {
	if v.keys[ks.key] != ks {
		return
	}
	delete(v.keys, ks.key)
	if _, held := v.held.Lookup(ks.key); !held {
		v.bare--
	}
}

// tidy forgets ks once it has neither waiters nor a grant in flight.
func (v *view) tidy(ks *keyState) {
	if ks.q == nil && !ks.granting {
		v.forget(ks)
	}
}

// resync corrects the view after the log answered that h, the view's holder of its key, does
// not hold it. lh is the holder the log has: none frees the key (and lines up the next
// waiter); another is held with its lease restarted in full, so no lease ends early.
func (n *Node) resync(h expiry.Entry, lh fsm.Holder, now int64) {
	n.log.Warn("lock view corrected from the log", "key", h.Key, "view_token", h.Token(), "log_token", uint64(lh.Token))
	if lh.Token == 0 {
		n.holderGone(h.Key, now)
		return
	}
	n.view.hold(h.Key, lh.Token, lh.Lease, now)
	if lh.Token > n.last {
		n.last = lh.Token
	}
}
