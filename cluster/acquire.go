package cluster

import (
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// acqOp is an acquire being decided: a client's request, or a queued waiter being granted.
type acqOp struct {
	c      *Session
	owner  uint64
	wait   uint8
	lease  uint16
	readAt int64
	epoch  uint64
	w      *waiter // set when this grants a queued waiter
	// age is how long the request had waited when its acquire was submitted (ms, rounded
	// down): a lower bound on its wait until the lease starts, which is later (the result).
	age uint32
}

// Acquire decides an acquire frame read at readAt (section 7). The answer goes to c.
// The caller has checked the frame (wire.Request.Check) already.
func (n *Node) Acquire(c *Session, owner uint64, key []byte, wait uint8, lease uint16, readAt time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// Only acquires make the gauges grow: look at them again once this one is decided, so a
	// gate closes the moment its gauge reaches 90%, not at the next acquire (which may find it
	// already lower again).
	defer n.observeGates()
	if n.draining || !n.leading.Load() {
		n.fail(c, owner, wire.ReasonUnavailable)
		return
	}
	if n.last >= fsm.MaxToken {
		// Section 4: once the last token is issued every acquire fails, held key or not.
		n.fail(c, owner, wire.ReasonTokenExhausted)
		return
	}
	now := n.mono(n.clock.Now())
	if !n.gates[gatePending].Admit(n.pending) {
		n.busy(c, owner, n.m.busyPending)
		return
	}
	op := acqOp{c: c, owner: owner, wait: wait, lease: lease, readAt: n.mono(readAt), epoch: n.epoch}
	if h, ok := n.view.held.Get(key); ok && h.Deadline <= now && !h.Parked() {
		// Lazily: the lease is over even if the sweep or the expiry timer has not run yet.
		if ks := n.view.keys[h.Key]; ks == nil || ks.q == nil || ks.q.empty() {
			// Nobody waits (waiters that timed out may still sit in the queue): this acquire
			// goes right behind the expiry, in its entry, so it is granted (the lock was free
			// when it arrived), wait 0 or not.
			n.ap.begin()
			n.proposeExpire(h, now, false)
			n.proposeAcquire(key, op, now)
			n.ap.end()
			return
		}
		n.expire(h, now) // the first waiter's grant goes behind it; this acquire queues
	}
	name, ok := n.view.name(key)
	if !ok {
		if !n.gates[gateKeys].Admit(n.view.len()) {
			n.busy(c, owner, n.m.busyKeys)
			return
		}
		n.proposeAcquire(key, op, now)
		return
	}
	n.enqueue(name, op, now, false)
}

// enqueue queues op behind the holder of key (a key in the view), or answers T when it
// cannot wait. logSaid is whether the log has just answered that key is held (an entry of
// this epoch): that T is definite as it stands; one read from the view is sent once the node
// is sure it still leads (fromView).
func (n *Node) enqueue(key string, op acqOp, now int64, logSaid bool) {
	if n.draining { // proposed before Drain, answered after: never granted, so it may go elsewhere
		n.fail(op.c, op.owner, wire.ReasonUnavailable)
		return
	}
	left := time.Duration(op.readAt + int64(op.wait)*int64(time.Second) - now)
	if op.wait == 0 || left <= 0 {
		t := wire.Response{Op: wire.OpTimeout, Owner: op.owner}
		if logSaid {
			n.m.acqTimeout.Inc()
			op.c.out.Reply(t)
			return
		}
		n.fromView(op.c, t, n.m.acqTimeout, "", 0, 0)
		return
	}
	if !n.gates[gateWaiters].Admit(n.waiters) {
		n.busy(op.c, op.owner, n.m.busyWaiters)
		return
	}
	ks := n.view.state(key)
	w := &waiter{c: op.c, owner: op.owner, lease: op.lease, readAt: op.readAt, deadline: op.readAt + int64(op.wait)*int64(time.Second), ks: ks}
	if ks.q == nil {
		ks.q = &queue{}
	}
	ks.q.push(w)
	if op.c.waiting == nil {
		op.c.waiting = make(map[*waiter]struct{})
	}
	op.c.waiting[w] = struct{}{}
	n.waiters++
	n.pending++
	w.stop = n.clock.AfterFunc(left, func() { n.waitTimedOut(w) })
}

// proposeAcquire applies the acquire of a key the view shows free, or of a waiter's turn.
// now is a reading of the node's clock taken before this submission: the grant's age
// (revision 2) is counted to it, never past it, so it is never more than the request waited
// before its lease started (the lease starts when the result comes back, later still). No
// timestamp goes into the command: an old leader paused between commit and its result must
// not count that pause, and the log never carries clock values for a lease.
func (n *Node) proposeAcquire(key []byte, op acqOp, now int64) {
	if op.w == nil {
		n.pending++ // until it is answered; a waiter is counted already
	}
	op.age = wire.AgeMillis(time.Duration(now - op.readAt))
	n.ap.apply(fsm.Command{Kind: fsm.CmdAcquire, Key: key, Lease: op.lease}, then{kind: fsm.CmdAcquire, acq: op})
}

// acquired acts on the result of an acquire: the waiter it carried is no longer proposed,
// and the result decides what follows. current is whether the view it was decided in is the
// one the node has now (same epoch, still leading).
func (n *Node) acquired(key []byte, op acqOp, r fsm.Result, err error, now int64) {
	current := op.epoch == n.epoch && n.leading.Load()
	w := op.w
	if w != nil {
		w.proposed = false
		if ks := w.ks; ks != nil {
			ks.granting = false
		}
	}
	switch {
	case err != nil:
		n.acquireFailed(op, outcome.Reason(err), current, now)
	case r.Kind == fsm.Granted:
		n.granted(key, op, r, current, now)
	case r.Kind == fsm.Held:
		n.heldAtApply(key, op, r, current, now)
	case r.Kind == fsm.Exhausted:
		n.last = fsm.MaxToken
		n.acquireFailed(op, wire.ReasonTokenExhausted, false, now)
		n.failWaiters(wire.ReasonTokenExhausted)
	default:
		n.log.Error("unexpected acquire result", "kind", r.Kind)
		n.acquireFailed(op, wire.ReasonInternal, false, now)
	}
}

// acquireFailed answers an acquire that was not applied (or not as asked) with reason; a
// waiter is retired and, in the current view, its key's queue moves on.
func (n *Node) acquireFailed(op acqOp, reason wire.Reason, current bool, now int64) {
	w := op.w
	if w != nil {
		n.retire(w, false)
	}
	n.fail(op.c, op.owner, reason)
	if w != nil && current {
		n.settle(w.ks, now)
	}
}

// granted records a grant in the view and answers it, or, when the client's connection
// closed while the grant was in the log, frees it again (nobody would release it).
func (n *Node) granted(key []byte, op acqOp, r fsm.Result, current bool, now int64) {
	w := op.w
	if r.Token > n.last {
		n.last = r.Token
	}
	if w != nil {
		n.retire(w, false)
	}
	if current {
		n.view.hold(r.Key, r.Token, op.lease, 0, now)
		if w != nil {
			n.view.tidy(w.ks)
		}
	}
	switch {
	case !op.c.ended.Load():
		n.m.acqAcquired.Inc()
		n.m.grantLatency.Observe(time.Duration(now - op.readAt).Seconds())
		if n.audit.on() {
			n.audit.grant(key, r.Token, op.lease, op.c.origin(op.owner))
		}
		op.c.out.Reply(wire.Response{Op: wire.OpAcquire, Owner: op.owner, Token: uint64(r.Token), Age: op.age})
	default:
		// When the view holds that grant (held just now, or rebuilt from the log by a newer
		// Lead) it is freed through the view, in this epoch, so the view follows.
		if h, ok := n.view.held.Lookup(r.Key); ok && tokenOf(h) == r.Token && !h.Parked() {
			n.endHold(h.Key, key, relOp{token: r.Token, epoch: n.epoch}, now)
		} else {
			n.proposeRelease(key, relOp{token: r.Token, epoch: op.epoch})
		}
	}
	if n.last >= fsm.MaxToken {
		n.log.Error("token counter exhausted: every later acquire fails with token_exhausted", "last_token", uint64(n.last))
		n.failWaiters(wire.ReasonTokenExhausted)
	}
}

// heldAtApply handles an acquire the log found held although the view showed the key free
// (or a waiter's turn come): the view missed a grant and is healed, and the request waits
// again (a waiter back at the head of its queue), unless it may no longer.
func (n *Node) heldAtApply(key []byte, op acqOp, r fsm.Result, current bool, now int64) {
	w := op.w
	name, ok := n.view.name(key)
	if !ok && current {
		name, ok = string(key), true
		n.view.hold(name, r.Holder.Token, r.Holder.Lease, r.Holder.Extensions, now)
	}
	switch {
	case !current || !ok:
		n.acquireFailed(op, wire.ReasonUnavailable, false, now)
	case w != nil && n.draining:
		n.acquireFailed(op, wire.ReasonUnavailable, false, now)
	case w != nil && (w.c.ended.Load() || now >= w.deadline):
		n.retire(w, false)
		if !w.c.ended.Load() {
			n.m.acqTimeout.Inc()
			w.c.out.Reply(wire.Response{Op: wire.OpTimeout, Owner: w.owner})
		}
	case w != nil:
		// The release or expiry in front of it did not free the key: back to the head.
		ks := n.view.state(name)
		w.ks = ks
		if ks.q == nil {
			ks.q = &queue{}
		}
		ks.q.pushFront(w)
	default:
		n.enqueue(name, op, now, true)
	}
}
