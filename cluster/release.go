package cluster

import (
	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// relOp is a release being decided.
type relOp struct {
	c     *Conn
	owner uint64
	token fsm.Token
	epoch uint64
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
	ks := n.view.keys[string(key)]
	if ks != nil && ks.item.Token == token && ks.item.Deadline <= now {
		// The lease ran out: the lock was free before this release arrived.
		if !ks.ending {
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
	n.endHold(ks, key, relOp{c: c, owner: owner, token: fsm.Token(token), epoch: n.epoch}, now)
}

// endHold releases ks's current holder and lines up the next waiter's grant behind it, in one
// entry.
func (n *Node) endHold(ks *keyState, key []byte, op relOp, now int64) {
	ks.ending = true
	n.ap.begin()
	n.proposeRelease(key, op)
	n.grantNext(ks, now)
	n.ap.end()
}

// proposeRelease applies a release. A release without a connection (op.c nil) compensates a
// grant nobody will receive.
func (n *Node) proposeRelease(key []byte, op relOp) {
	n.ap.apply(fsm.Command{Kind: fsm.CmdRelease, Key: key, Token: op.token}, then{kind: fsm.CmdRelease, rel: op})
}

func (n *Node) released(key []byte, op relOp, r fsm.Result, err error, now int64) {
	var resp wire.Response
	ks := n.view.keys[string(key)]
	mine := ks != nil && op.epoch == n.epoch && fsm.Token(ks.item.Token) == op.token
	switch {
	case err != nil:
		reason := outcome.Reason(err)
		n.m.FrameError(reason)
		resp = wire.Response{Op: wire.OpError, Owner: op.owner, Reason: reason}
		if mine && ks.ending {
			// Not released, or not known to be: the holder keeps its lease in the view, and
			// its expiry (which the sweep skipped while the release was out) is armed again.
			// If the release did apply, that expiry comes back stale and resyncs the view.
			ks.ending = false
			if !ks.item.Queued() {
				n.view.heap.Push(&ks.item)
			}
		}
	case r.Kind == fsm.Released:
		n.m.relReleased.Inc()
		if op.c != nil && !op.c.gone {
			op.c.out.Reply(wire.Response{Op: wire.OpRelease, Owner: op.owner}) // before the next holder's A
		}
		if mine {
			n.holderGone(ks, now)
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
