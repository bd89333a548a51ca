package cluster

import (
	"bytes"
	"errors"
	"time"

	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// acqOp is an acquire being decided: a client's request, or a queued waiter being granted.
type acqOp struct {
	c      *Conn
	owner  uint64
	wait   uint8
	lease  uint16
	readAt int64
	epoch  uint64
	w      *waiter // set when this grants a queued waiter
}

// relOp is a release being decided.
type relOp struct {
	c     *Conn
	owner uint64
	token fsm.Token
	epoch uint64
}

// Acquire decides an acquire frame read at readAt (section 7). The answer goes to c.
// The caller has checked the frame (wire.Request.Check) already.
func (n *Node) Acquire(c *Conn, owner uint64, key []byte, wait uint8, lease uint16, readAt time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// Only acquires make the gauges grow: look at them again once this one is decided, so a
	// gate closes the moment its gauge reaches 90%, not at the next acquire (which may find it
	// already lower again).
	defer n.observeGates()
	if n.draining || !n.leading {
		n.fail(c, owner, wire.ReasonUnavailable)
		return
	}
	if n.last >= fsm.MaxToken {
		// Section 4: once the last token is issued every acquire fails, held key or not.
		n.fail(c, owner, wire.ReasonTokenExhausted)
		return
	}
	now := n.mono(n.clock.Now())
	ks := n.keys[string(key)]
	if ks != nil && ks.item.Token != 0 && ks.item.Deadline <= now && !ks.freeing {
		n.expire(ks, now) // lazily: the lease is over even if the sweep has not run yet
		ks = n.keys[string(key)]
	}
	if !n.gates[gatePending].Admit(n.pending) {
		n.busy(c, owner, n.m.busyPending)
		return
	}
	op := acqOp{c: c, owner: owner, wait: wait, lease: lease, readAt: n.mono(readAt), epoch: n.epoch}
	if ks == nil {
		if !n.gates[gateKeys].Admit(len(n.keys)) {
			n.busy(c, owner, n.m.busyKeys)
			return
		}
		n.proposeAcquire(key, op, now)
		return
	}
	n.enqueue(ks, op, now)
}

// enqueue queues op behind ks's holder, or answers T when it cannot wait.
func (n *Node) enqueue(ks *keyState, op acqOp, now int64) {
	if n.draining { // proposed before Drain, answered after: never granted, so it may go elsewhere
		n.fail(op.c, op.owner, wire.ReasonUnavailable)
		return
	}
	left := time.Duration(op.readAt + int64(op.wait)*int64(time.Second) - now)
	if op.wait == 0 || left <= 0 {
		n.m.acqTimeout.Inc()
		op.c.out.Reply(wire.Response{Op: wire.OpTimeout, Owner: op.owner})
		return
	}
	if !n.gates[gateWaiters].Admit(n.waiters) {
		n.busy(op.c, op.owner, n.m.busyWaiters)
		return
	}
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

// proposeAcquire applies (single mode) or proposes (cluster mode) the acquire of a key the
// view shows free, or of a waiter's turn.
func (n *Node) proposeAcquire(key []byte, op acqOp, now int64) {
	cmd := fsm.Command{Kind: fsm.CmdAcquire, Key: key, Lease: op.lease}
	if n.local != nil {
		n.acquired(key, op, n.local.ApplyCommand(cmd), nil, now)
		return
	}
	cmd.Key = bytes.Clone(key)
	if op.w == nil {
		n.pending++ // a waiter is counted already
	}
	n.submit(cmd, func(r fsm.Result, err error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		if op.w == nil {
			n.pending--
		}
		n.acquired(cmd.Key, op, r, err, n.mono(n.clock.Now()))
	})
}

// acquired acts on the result of an acquire.
func (n *Node) acquired(key []byte, op acqOp, r fsm.Result, err error, now int64) {
	current := op.epoch == n.epoch && n.leading
	w := op.w
	if w != nil {
		w.proposed = false
		if ks := w.ks; ks != nil {
			ks.handoff = false
		}
	}
	switch {
	case err != nil:
		reason := wire.ReasonUnavailable
		if errors.Is(err, ErrMaybeApplied) {
			reason = wire.ReasonIndeterminate
		}
		if w != nil {
			n.retire(w, false)
		}
		n.fail(op.c, op.owner, reason)
		if w != nil && current {
			n.afterHandoff(w.ks, now)
		}
	case r.Kind == fsm.Granted:
		if r.Token > n.last {
			n.last = r.Token
		}
		if w != nil {
			n.retire(w, false)
		}
		if current {
			n.track(r.Key, r.Token, op.lease, now, w)
		}
		if op.c.gone {
			// Its connection closed while the grant was in the log: nobody will release it.
			// When the view holds that grant (tracked just now, or rebuilt from the log by a
			// newer Lead) it is freed through the view, in this epoch, so the view follows.
			if ks := n.keys[r.Key]; ks != nil && fsm.Token(ks.item.Token) == r.Token && !ks.freeing {
				n.free(ks, key, relOp{token: r.Token, epoch: n.epoch}, now)
			} else {
				n.proposeRelease(key, relOp{token: r.Token, epoch: op.epoch}, now)
			}
		} else {
			n.m.acqAcquired.Inc()
			n.m.grantLatency.Observe(time.Duration(now - op.readAt).Seconds())
			op.c.out.Reply(wire.Response{Op: wire.OpAcquire, Owner: op.owner, Token: uint64(r.Token)})
		}
		if n.last >= fsm.MaxToken {
			n.log.Error("token counter exhausted: every later acquire fails with token_exhausted", "last_token", uint64(n.last))
			n.failWaiters(wire.ReasonTokenExhausted)
		}
	case r.Kind == fsm.Held:
		ks := n.keys[string(key)]
		if ks == nil && current {
			ks = n.adopt(string(key), r.Holder, now) // the view missed a grant: heal it
		}
		switch {
		case !current || ks == nil:
			if w != nil {
				n.retire(w, false)
			}
			n.fail(op.c, op.owner, wire.ReasonUnavailable)
		case w != nil && n.draining:
			n.retire(w, false)
			n.fail(w.c, w.owner, wire.ReasonUnavailable)
		case w != nil:
			// The release or expiry in front of it did not free the key: back to the head.
			if w.c.gone || now >= w.deadline {
				n.retire(w, false)
				if !w.c.gone {
					n.m.acqTimeout.Inc()
					w.c.out.Reply(wire.Response{Op: wire.OpTimeout, Owner: w.owner})
				}
				break
			}
			w.ks = ks
			if ks.q == nil {
				ks.q = &queue{}
			}
			ks.q.pushFront(w)
		default:
			n.enqueue(ks, op, now)
		}
	case r.Kind == fsm.Exhausted:
		n.last = fsm.MaxToken
		if w != nil {
			n.retire(w, false)
		}
		n.fail(op.c, op.owner, wire.ReasonTokenExhausted)
		n.failWaiters(wire.ReasonTokenExhausted)
	default:
		n.log.Error("unexpected acquire result", "kind", r.Kind)
		if w != nil {
			n.retire(w, false)
		}
		n.fail(op.c, op.owner, wire.ReasonInternal)
	}
}

// track records a grant in the view: the key's holder and its lease deadline in the heap.
// w is the waiter it went to (its key state is reused), or nil.
func (n *Node) track(key string, tok fsm.Token, lease uint16, now int64, w *waiter) {
	ks := n.keys[key]
	if ks == nil {
		if w != nil && w.ks != nil {
			ks = w.ks
		} else {
			ks = &keyState{}
		}
		n.keys[key] = ks
	}
	n.heap.Remove(&ks.item)
	ks.item.Key, ks.item.Token, ks.freeing = key, uint64(tok), false
	ks.item.Deadline = now + int64(lease)*int64(time.Second)
	n.heap.Push(&ks.item)
}

// adopt puts a holder the view did not know into it, with its lease restarted in full.
func (n *Node) adopt(key string, h fsm.Holder, now int64) *keyState {
	ks := &keyState{}
	n.keys[key] = ks
	ks.item.Key, ks.item.Token = key, uint64(h.Token)
	ks.item.Deadline = now + int64(h.Lease)*int64(time.Second)
	n.heap.Push(&ks.item)
	return ks
}

// Release decides a release frame: R if token is the key's current holder, else N.
func (n *Node) Release(c *Conn, owner uint64, key []byte, token uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.leading {
		n.m.FrameError(wire.ReasonUnavailable)
		c.out.Reply(wire.Response{Op: wire.OpError, Owner: owner, Reason: wire.ReasonUnavailable})
		return
	}
	now := n.mono(n.clock.Now())
	ks := n.keys[string(key)]
	if ks != nil && ks.item.Token == token && ks.item.Deadline <= now {
		// The lease ran out: the lock was free before this release arrived.
		if !ks.freeing {
			n.expire(ks, now)
		}
		ks = nil
	}
	if ks == nil || ks.item.Token == 0 || ks.item.Token != token {
		// The view knows every grant a client can hold a token of (a grant is tracked
		// before its A is sent), so this is definite.
		n.m.relNotHeld.Inc()
		c.out.Reply(wire.Response{Op: wire.OpNotHeld, Owner: owner})
		return
	}
	n.free(ks, key, relOp{c: c, owner: owner, token: fsm.Token(token), epoch: n.epoch}, now)
}

// free releases ks's current holder and lines up the next waiter's grant behind it.
func (n *Node) free(ks *keyState, key []byte, op relOp, now int64) {
	ks.freeing = true
	n.beginGroup()
	n.proposeRelease(key, op, now)
	n.handoff(ks, now)
	n.endGroup()
}

// submit hands cmd to the proposer, or to the group being built (cluster mode).
func (n *Node) submit(cmd fsm.Command, done func(fsm.Result, error)) {
	if n.grouping {
		n.group = append(n.group, Proposal{Cmd: cmd, Done: done})
		return
	}
	n.rep.Propose.Submit(cmd, done)
}

// beginGroup starts collecting submissions that belong in one log entry (a release or
// expiry and the grant behind it). Single mode applies in place and never groups.
func (n *Node) beginGroup() {
	if n.local == nil {
		n.grouping = true
	}
}

// endGroup proposes what beginGroup collected: as one entry when the proposer can.
func (n *Node) endGroup() {
	if n.local != nil {
		return
	}
	n.grouping = false
	g := n.group
	n.group = nil
	if gp, ok := n.rep.Propose.(GroupProposer); ok && len(g) > 1 {
		gp.SubmitGroup(g)
		return
	}
	for _, p := range g {
		n.rep.Propose.Submit(p.Cmd, p.Done)
	}
}

// proposeRelease applies or proposes a release. A release without a connection (op.c nil)
// compensates a grant nobody will receive.
func (n *Node) proposeRelease(key []byte, op relOp, now int64) {
	cmd := fsm.Command{Kind: fsm.CmdRelease, Key: key, Token: op.token}
	if n.local != nil {
		n.released(key, op, n.local.ApplyCommand(cmd), nil, now)
		return
	}
	cmd.Key = bytes.Clone(key)
	n.submit(cmd, func(r fsm.Result, err error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.released(cmd.Key, op, r, err, n.mono(n.clock.Now()))
	})
}

func (n *Node) released(key []byte, op relOp, r fsm.Result, err error, now int64) {
	var resp wire.Response
	ks := n.keys[string(key)]
	mine := ks != nil && op.epoch == n.epoch && fsm.Token(ks.item.Token) == op.token
	switch {
	case err != nil:
		reason := wire.ReasonUnavailable
		if errors.Is(err, ErrMaybeApplied) {
			reason = wire.ReasonIndeterminate
		}
		n.m.FrameError(reason)
		resp = wire.Response{Op: wire.OpError, Owner: op.owner, Reason: reason}
		if mine && ks.freeing {
			// Not released, or not known to be: the holder keeps its lease in the view, and
			// its expiry (which the sweep skipped while the release was out) is armed again.
			// If the release did apply, that expiry comes back stale and resyncs the view.
			ks.freeing = false
			if !ks.item.Queued() {
				n.heap.Push(&ks.item)
			}
		}
	case r.Kind == fsm.Released:
		n.m.relReleased.Inc()
		if op.c != nil && !op.c.gone {
			op.c.out.Reply(wire.Response{Op: wire.OpRelease, Owner: op.owner}) // before the next holder's A
		}
		if mine {
			n.freed(ks, now)
		}
		return
	default:
		n.m.relNotHeld.Inc()
		resp = wire.Response{Op: wire.OpNotHeld, Owner: op.owner}
		if mine {
			// The log says the view's holder does not hold the key: the view missed a change
			// (an earlier release whose outcome was unknown here, say). The log is right.
			n.resync(ks, r.Holder, now)
		}
	}
	if op.c != nil && !op.c.gone {
		op.c.out.Reply(resp)
	}
}

// resync corrects ks after the log answered that the view's holder does not hold the key. h is
// the holder the log has: none frees the key (and lines up the next waiter); another is
// tracked with its lease restarted in full, as adopt does, so no lease ends early.
func (n *Node) resync(ks *keyState, h fsm.Holder, now int64) {
	n.log.Warn("lock view corrected from the log", "key", ks.item.Key, "view_token", ks.item.Token, "log_token", uint64(h.Token))
	if h.Token == 0 {
		n.freed(ks, now)
		return
	}
	n.heap.Remove(&ks.item)
	ks.item.Token, ks.freeing = uint64(h.Token), false
	ks.item.Deadline = now + int64(h.Lease)*int64(time.Second)
	n.heap.Push(&ks.item)
	if h.Token > n.last {
		n.last = h.Token
	}
}

// freed runs after ks's holder is gone (released or expired): the next live waiter is
// granted in FIFO order; without one the key leaves the view.
func (n *Node) freed(ks *keyState, now int64) {
	n.heap.Remove(&ks.item)
	ks.item.Token, ks.freeing = 0, false
	n.afterHandoff(ks, now)
}

// afterHandoff drops ks from the view when it has no holder and no hand-off in flight.
func (n *Node) afterHandoff(ks *keyState, now int64) {
	if ks.item.Token != 0 || ks.handoff {
		return
	}
	n.handoff(ks, now)
	if !ks.handoff && ks.item.Token == 0 {
		if n.keys[ks.item.Key] == ks {
			delete(n.keys, ks.item.Key)
		}
	}
}

// handoff proposes the head live waiter's acquire, unless one is in flight already. In cluster
// mode it is called right after a release or expiry is proposed, so the grant follows in the
// log without waiting for the release's result; in single mode the release has been applied.
func (n *Node) handoff(ks *keyState, now int64) {
	if ks.handoff || ks.q == nil || (ks.item.Token != 0 && !ks.freeing) || n.last >= fsm.MaxToken {
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
		w.proposed, ks.handoff = true, true
		n.proposeAcquire([]byte(ks.item.Key), acqOp{c: w.c, owner: w.owner, lease: w.lease, readAt: w.readAt, epoch: n.epoch, w: w}, now)
		return
	}
}

// retire takes a live waiter out of the counts (it is being granted, timed out, cancelled
// or answered unavailable). queued says it still sits in its key's queue, where its slot is
// then skipped later.
func (n *Node) retire(w *waiter, queued bool) {
	if w.done {
		return
	}
	w.done = true
	if w.stop != nil {
		w.stop()
	}
	n.waiters--
	n.pending--
	delete(w.c.waiting, w)
	if q := w.ks.q; queued && q != nil {
		q.dead++
		q.compact()
	}
}

func (n *Node) waitTimedOut(w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.done || w.proposed {
		return // granted, cancelled, or its acquire is in the log: the result decides
	}
	n.retire(w, true)
	n.m.acqTimeout.Inc()
	if !w.c.gone {
		w.c.out.Reply(wire.Response{Op: wire.OpTimeout, Owner: w.owner})
	}
}
