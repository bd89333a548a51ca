package cluster

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// relOp is a release being decided.
type relOp struct {
	c     *Session
	owner uint64
	token fsm.Token
	epoch uint64
	at    int64 // when the node took it (node clock), for the release latency; 0: not a client's
	// done, if set, gets the result instead of a connection (an operator's ForceRelease),
	// and by says who that operator is (the audit trail).
	done func(fsm.Result, error)
	by   Operator
}

// Release decides a release frame: R if token is the key's current holder, else N.
func (n *Node) Release(c *Session, owner uint64, key []byte, token uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.leading.Load() {
		n.m.FrameError(wire.ReasonUnavailable)
		c.out.Reply(wire.Response{Op: wire.OpError, Owner: owner, Reason: wire.ReasonUnavailable})
		return
	}
	now := n.mono(n.clock.Now())
	h, ok := n.view.held.Get(key)
	if ok && h.Token() == token && h.Deadline <= now {
		// The lease ran out: the lock was free before this release arrived.
		if !h.Parked() {
			n.expire(h, now)
		}
		ok = false
	}
	if !ok || h.Token() != token {
		// The view knows every grant of its epoch a client can hold a token of (a grant is
		// held in the view before its A is sent): N, once the node is sure it still leads.
		n.fromView(c, wire.Response{Op: wire.OpNotHeld, Owner: owner}, n.m.relNotHeld, n.auditKey(key), token, now)
		return
	}
	n.endHold(h.Key, key, relOp{c: c, owner: owner, token: fsm.Token(token), epoch: n.epoch, at: now}, now)
}

// endHold releases name's current holder (op.token) and lines up the next waiter's grant
// behind it, in one entry. While the release is out the holder is parked: the sweep leaves it
// alone. (In single mode the release is applied before apply returns, and the holder is gone.)
func (n *Node) endHold(name string, key []byte, op relOp, now int64) {
	n.ap.begin()
	n.proposeRelease(key, op)
	n.view.held.Park(name, uint64(op.token)) // unless it is gone already
	n.grantNext(name, now)
	n.ap.end()
}

// proposeRelease applies a release. A release without a connection (op.c nil) compensates a
// grant nobody will receive.
func (n *Node) proposeRelease(key []byte, op relOp) {
	n.ap.apply(fsm.Command{Kind: fsm.CmdRelease, Key: key, Token: op.token}, then{kind: fsm.CmdRelease, rel: op})
}

func (n *Node) released(key []byte, op relOp, r fsm.Result, err error, now int64) {
	var resp wire.Response
	h, ok := n.view.held.Get(key)
	mine := ok && op.epoch == n.epoch && tokenOf(h) == op.token
	if op.at != 0 && err == nil {
		n.m.released(time.Duration(now - op.at))
	}
	if op.done != nil {
		op.done(r, err)
	}
	if n.audit.on() {
		n.auditRelease(key, op, r, err)
	}
	switch {
	case err != nil:
		reason := outcome.Reason(err)
		n.m.FrameError(reason)
		resp = wire.Response{Op: wire.OpError, Owner: op.owner, Reason: reason}
		if mine && h.Parked() {
			// Not released, or not known to be: the holder keeps its lease in the view, and
			// its expiry (which the sweep skipped while the release was out) is armed again.
			// If the release did apply, that expiry comes back stale and resyncs the view.
			n.view.held.Arm(h.Key, h.Deadline)
		}
	case r.Kind == fsm.Released:
		n.m.relReleased.Inc()
		if op.c != nil && !op.c.ended.Load() {
			op.c.out.Reply(wire.Response{Op: wire.OpRelease, Owner: op.owner}) // before the next holder's A
		}
		if mine {
			n.holderGone(h.Key, now)
		}
		return
	default:
		n.m.relNotHeld.Inc()
		resp = wire.Response{Op: wire.OpNotHeld, Owner: op.owner}
		if mine {
			// The log says the view's holder does not hold the key: the view missed a change
			// (an earlier release whose outcome was unknown here, say). The log is right.
			n.resync(h, r.Holder, now)
		}
	}
	if op.c != nil && !op.c.ended.Load() {
		op.c.out.Reply(resp)
	}
}

// fromView sends resp, an answer the node read from its view (a release's N, an acquire's T),
// once no leader change can have made it wrong, and counts it in sent. In single mode that is
// at once: there is no other leader. In cluster mode it waits until raft has confirmed that
// this node still led, in the same term, after the view was read (raftnode's Confirm: one
// heartbeat round, no log entry), and the node is still in the epoch it read in; otherwise
// the client gets E unavailable, which is true (nothing was changed for it) and which it may
// retry with the new leader. A leader paused past a lease and resumed therefore never
// answers from the view it had before it was deposed. See doc.go. A release's N observes the
// release latency from at (node clock), and is audited (released is the key, "" when not
// auditing or not a release).
func (n *Node) fromView(c *Session, resp wire.Response, sent prometheus.Counter, released string, token uint64, at int64) {
	n.confirmed(func(err error, now int64) {
		if err != nil {
			n.log.Debug("answer from the view not confirmed: unavailable instead", "op", resp.Op.String(), "error", err)
			n.m.FrameError(wire.ReasonUnavailable)
			if resp.Op == wire.OpTimeout {
				n.m.acqUnavailable.Inc()
			}
			resp = wire.Response{Op: wire.OpError, Owner: resp.Owner, Reason: wire.ReasonUnavailable}
		} else {
			sent.Inc()
			if resp.Op == wire.OpNotHeld {
				n.m.released(time.Duration(now - at))
			}
		}
		if released != "" {
			n.audit.release("release", []byte(released), fsm.Token(token), auditResult(resp), c.origin(resp.Owner))
		}
		if !c.ended.Load() {
			c.out.Reply(resp)
		}
	})
}

// confirmed calls fn once what the node just read from its view is safe to use: at once in
// single mode; in cluster mode once raft confirmed this node still leads (applier.confirm),
// and only if the node still decides in the epoch it read in. Otherwise err is of outcome
// NotLeader. fn runs with n.mu held, with the node's clock. The caller holds n.mu.
func (n *Node) confirmed(fn func(err error, now int64)) {
	epoch := n.epoch
	n.ap.confirm(func(err error, now int64) {
		if err == nil && (!n.leading.Load() || n.epoch != epoch) {
			err = outcome.New(outcome.NotLeader, errEpochChanged)
		}
		fn(err, now)
	})
}

// auditKey is key as the audit trail keeps it past the call: "" when auditing is off.
func (n *Node) auditKey(key []byte) string {
	if !n.audit.on() {
		return ""
	}
	return string(key)
}

// auditResult names the outcome of an answer in the audit trail.
func auditResult(resp wire.Response) string {
	switch resp.Op {
	case wire.OpRelease:
		return "released"
	case wire.OpNotHeld:
		return "not_held"
	case wire.OpError:
		return string(resp.Reason)
	}
	return resp.Op.String()
}

// auditRelease records a release's result from the log: the holder's own (from its
// connection), an operator's forced release, or the leader's compensation of a grant nobody
// received.
func (n *Node) auditRelease(key []byte, op relOp, r fsm.Result, err error) {
	event, from := "release", origin{from: "leader"}
	switch {
	case op.done != nil:
		event, from = "force_release", op.by.origin()
	case op.c != nil:
		from = op.c.origin(op.owner)
	}
	result := "not_held"
	switch {
	case err != nil:
		result = string(outcome.Reason(err))
	case r.Kind == fsm.Released:
		result = "released"
	}
	n.audit.release(event, key, op.token, result, from)
}
