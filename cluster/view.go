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
	held  expiry.Heap
	keys  map[string]*keyState
	extra map[string]holdExtra // the few holders that have one (see holdExtra)
	bare  int                  // keys in keys without a holder in held
}

// holdExtra is what the view knows of a holder besides its heap entry, kept only for a holder
// that has been extended or whose lease ended with its expiry still to be retried (revision
// 2), so that the common holder costs nothing more.
type holdExtra struct {
	// ext is the holder's extension count (fsm.Holder.Extensions): every Expire of it must
	// carry it, so that an expiry made for a lease before an extend frees nothing after it.
	ext uint32
	// over: the lease ended on this node's clock, and the expiry that frees it failed and is
	// retried. The heap's deadline is then the retry's, not the lease's: an extend must not
	// judge the lease by it.
	over bool
	// logged is how many extends of the holder are in the log, their results still to come:
	// while one is, the lease the table stores may be about to change, so no extend is
	// decided without the log (Node.Extend).
	logged uint32
}

// reset empties the view (at a leadership change).
func (v *view) reset() {
	v.held = expiry.NewHeap()
	v.keys = make(map[string]*keyState)
	v.extra = make(map[string]holdExtra)
	v.bare = 0
}

// extOf is the extension count of key's holder in the view.
func (v *view) extOf(key string) uint32 { return v.extra[key].ext }

// over reports whether the lease of key's holder is known to have ended (its expiry is being
// retried), whatever the heap's deadline says.
func (v *view) over(key string) bool { return v.extra[key].over }

// ended marks the lease of key's holder over: its expiry failed and will be retried.
func (v *view) ended(key string) {
	x := v.extra[key]
	x.over = true
	v.extra[key] = x
}

// extended records that key's holder tok has the extension count ext and a lease that now
// ends at deadline (it stays parked if it was: a release of it may be in flight).
func (v *view) extended(key string, tok fsm.Token, ext uint32, deadline int64) {
	v.held.Retime(key, uint64(tok), deadline)
	x := v.extra[key]
	x.ext, x.over = ext, false
	v.extra[key] = x
}

// logExtend counts an extend of key's holder submitted to the log (done false) or answered
// (done true).
func (v *view) logExtend(key string, done bool) {
	x, ok := v.extra[key]
	if !ok && done {
		return // the holder left the view meanwhile
	}
	if done {
		if x.logged == 0 {
			return
		}
		x.logged--
	} else {
		x.logged++
	}
	if x == (holdExtra{}) {
		delete(v.extra, key)
		return
	}
	v.extra[key] = x
}

// logging reports whether an extend of key's holder is in the log.
func (v *view) logging(key string) bool { return v.extra[key].logged != 0 }

// len is the number of keys in the view.
func (v *view) len() int { return v.held.Len() + v.bare }

// hold makes tok the holder of key with its lease counted in full from now. It is the one way
// a holder enters the view: a grant, a holder the view missed, a correction from the log, and
// every holder at a new leader's start. key should be the table's own string.
//
// ext is the holder's extension count in the table (0 for a fresh grant).
func (v *view) hold(key string, tok fsm.Token, lease uint16, ext uint32, now int64) {
	var logged uint32 // the same holder's extends in the log stay counted
	if len(v.extra) != 0 {
		if prev, ok := v.held.Lookup(key); ok && prev.Token() == uint64(tok) {
			logged = v.extra[key].logged
		}
	}
	if v.held.Set(key, uint64(tok), now+int64(lease)*int64(time.Second)) && v.keys[key] != nil {
		v.bare--
	}
	if ext != 0 || logged != 0 {
		v.extra[key] = holdExtra{ext: ext, logged: logged}
	} else if len(v.extra) != 0 {
		delete(v.extra, key)
	}
}

// drop forgets key's holder.
func (v *view) drop(key string) {
	if v.held.Remove(key) && v.keys[key] != nil {
		v.bare++
	}
	if len(v.extra) != 0 {
		delete(v.extra, key)
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
	n.view.hold(h.Key, lh.Token, lh.Lease, lh.Extensions, now)
	if lh.Token > n.last {
		n.last = lh.Token
	}
}
