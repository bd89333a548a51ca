package cluster

import (
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// extOp is an extend being decided (revision 2).
type extOp struct {
	c     *Session
	owner uint64
	token fsm.Token
	lease uint16
	epoch uint64
}

// Revisions are the protocol revisions the node serves to clients now, as hello flags
// (wire.FlagLeases or 0): what a session echoes of a client's offer. A single-mode node
// serves revision 2 from the start; a cluster node once the cluster's feature switch is on
// in its applied log (every member supports it), so that no client ever meets a revision on
// one node that a leader of another version could not honour.
//
// A restarted cluster node also offers what its member remembers was switched on
// (Replicated.Remembered), before its log is replayed that far: the switch is one-way.
func (n *Node) Revisions() uint8 {
	if n.ap.offered().Has(fsm.FeatureLeases) {
		return wire.FlagLeases
	}
	return 0
}

// extends reports whether this node may apply an extend now: only when its applied log has
// the switch (or in single mode). The caller holds n.mu.
func (n *Node) extends() bool { return n.ap.features().Has(fsm.FeatureLeases) }

// Extend decides an extend frame (revision 2, docs/protocol.md section 7): L when token holds
// key with a lease that has not ended on this node's clock, and the extend applied; N
// otherwise. The caller has checked the frame.
//
// The rules that keep it safe against expiry (docs/protocol.md section 13): a holder whose release or
// expiry is in flight (parked), or whose lease is over, is never extended; the view's
// deadline moves forward when the extend is submitted, so that no expiry for the old lease is
// proposed while it is in the log; the Expire of every later end carries the holder's
// extension count, which the extend bumps, so an expiry made for the old lease frees nothing.
// The new lease counts from the moment the result comes back (the table applied it by then),
// and the table stores it, so a new leader restarts the extended lease in full.
func (n *Node) Extend(c *Session, owner uint64, key []byte, token uint64, lease uint16) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.leading.Load() {
		n.fail(c, owner, wire.ReasonUnavailable)
		return
	}
	if !n.extends() {
		// Definite: nothing was extended, and asking another node will not help while the
		// cluster has members without extend (never unavailable, which a client retries).
		n.m.extUnsupported.Inc()
		n.fail(c, owner, wire.ReasonUnsupported)
		return
	}
	now := n.mono(n.clock.Now())
	h, ok := n.view.held.Get(key)
	if ok && h.Token() == token && (h.Deadline <= now || n.view.over(h.Key)) {
		// The lease ended, even if its expiry has not applied yet: it is never revived.
		if !h.Parked() && h.Deadline <= now {
			n.expire(h, now)
		}
		ok = false
	}
	if !ok || h.Token() != token || h.Parked() {
		// Not this token's, over, or a release or expiry of it is in flight: N from the
		// view, once the node is sure it still leads (as a release's N).
		n.fromView(c, wire.Response{Op: wire.OpNotHeld, Owner: owner}, n.m.extNotHeld, "", 0, 0)
		return
	}
	if d := now + int64(lease)*int64(time.Second); d > h.Deadline {
		n.view.held.Retime(h.Key, token, d) // no expiry of the old lease while this is out
	}
	op := extOp{c: c, owner: owner, token: fsm.Token(token), lease: lease, epoch: n.epoch}
	if n.lane.on && n.sameLease(h.Key, key, op.token, lease) {
		n.extendLocally(h.Key, op)
		return
	}
	n.view.logExtend(h.Key, false)
	n.ap.apply(fsm.Command{Kind: fsm.CmdExtend, Key: key, Token: op.token, Lease: lease}, then{kind: fsm.CmdExtend, ext: op})
}

// sameLease reports whether an extend of name's holder tok for lease needs no log entry: the
// table stores that lease for that token already, and no extend of it is in the log (which
// could change the stored lease under this one). The caller holds n.mu, on a cluster leader.
//
// Why the log adds nothing then (etcd's model of a keep-alive): what a new leader would
// restart is the stored lease, in full, from its own start, which comes after this leader
// confirmed it still led (extendLocally), so after the client wrote the extend; the client
// counts written_at + lease. The leader's own view counts the lease from the confirmation.
func (n *Node) sameLease(name string, key []byte, tok fsm.Token, lease uint16) bool {
	if n.view.logging(name) {
		return false
	}
	same := false
	n.ap.read(func(t *fsm.Table) {
		if lh, ok := t.Holder(key); ok && lh.Token == tok && lh.Lease == lease {
			same = true
		}
	})
	return same
}

// extendLocally answers an extend that keeps the stored lease without a log entry: once raft
// confirmed that this node still leads (one heartbeat round, shared, as for a release's N),
// the holder's lease is counted anew from that moment and the answer is L; if the holder
// changed meanwhile (a forced release, say, parked it), N; unconfirmed, E unavailable (the
// view may keep the later deadline it was given: a lock freed later, never earlier).
func (n *Node) extendLocally(name string, op extOp) {
	n.confirmed(func(err error, now int64) {
		var resp wire.Response
		h, ok := n.view.held.Lookup(name)
		switch {
		case err != nil:
			n.m.FrameError(wire.ReasonUnavailable)
			resp = wire.Response{Op: wire.OpError, Owner: op.owner, Reason: wire.ReasonUnavailable}
		case !ok || tokenOf(h) != op.token || h.Parked() || n.view.over(name):
			n.m.extNotHeld.Inc()
			resp = wire.Response{Op: wire.OpNotHeld, Owner: op.owner}
		default:
			n.m.extExtended.Inc()
			n.view.held.Retime(name, uint64(op.token), now+int64(op.lease)*int64(time.Second))
			if n.audit.on() {
				n.audit.extend([]byte(name), op.token, op.lease, op.c.origin(op.owner))
			}
			resp = wire.Response{Op: wire.OpExtend, Owner: op.owner}
		}
		if !op.c.ended.Load() {
			op.c.out.Reply(resp)
		}
	})
}

// extendedResult acts on the result of an extend.
func (n *Node) extendedResult(key []byte, op extOp, r fsm.Result, err error, now int64) {
	h, ok := n.view.held.Get(key)
	mine := ok && op.epoch == n.epoch && n.leading.Load() && tokenOf(h) == op.token
	if mine {
		n.view.logExtend(h.Key, true)
	}
	var resp wire.Response
	switch {
	case err != nil:
		// Not applied, or not known to be. The view keeps the later deadline it moved to:
		// the lock may be freed later than the lease, never earlier.
		reason := outcome.Reason(err)
		n.m.FrameError(reason)
		resp = wire.Response{Op: wire.OpError, Owner: op.owner, Reason: reason}
	case r.Kind == fsm.Extended:
		n.m.extExtended.Inc()
		if mine {
			// The lease now ends lease seconds after the table applied it, which was no
			// later than now: counted from now, it ends no earlier than the client's.
			n.view.extended(h.Key, op.token, r.Holder.Extensions, now+int64(op.lease)*int64(time.Second))
		}
		if n.audit.on() {
			n.audit.extend(key, op.token, op.lease, op.c.origin(op.owner))
		}
		resp = wire.Response{Op: wire.OpExtend, Owner: op.owner}
	case r.Kind == fsm.ExtendLimit:
		// The holder was extended fsm.MaxExtensions times: its lease runs out as it stands.
		// Nothing was extended, so for this request the token does not hold a lease to grow.
		n.m.extNotHeld.Inc()
		n.log.Warn("extend refused: the holder has been extended the most times a holder can be", "key", string(key), "token", uint64(op.token))
		resp = wire.Response{Op: wire.OpNotHeld, Owner: op.owner}
	default:
		n.m.extNotHeld.Inc()
		if mine && !h.Parked() {
			// The log says the view's holder does not hold the key: the view missed a
			// change; the log is right.
			n.resync(h, r.Holder, now)
		}
		resp = wire.Response{Op: wire.OpNotHeld, Owner: op.owner}
	}
	if op.c != nil && !op.c.ended.Load() {
		op.c.out.Reply(resp)
	}
}
