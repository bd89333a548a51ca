package cluster

import (
	"math"
	"time"

	"github.com/latchd/latch/expiry"
	"github.com/latchd/latch/fsm"
)

// retryExpire is how long an expiry that could not be proposed waits before it is tried
// again (the lease stays over; the lock is only freed later, never earlier).
const retryExpire = time.Second

// lane is the cluster-mode leader's expiry timer and its bounded lane into the log: a timer
// set for the view's earliest deadline, and the count of expiries it has proposed whose
// results have not come back. Its fields are guarded by the node's mutex.
type lane struct {
	on       bool        // cluster mode (fixed at NewNode)
	max      int         // most lane expiries in flight (Replicated.ExpiryInFlight)
	group    int         // most commands per group (Replicated.ExpiryGroup)
	inflight int         // lane expiries of this epoch proposed and not answered
	at       int64       // the armed timer's deadline; math.MaxInt64: none armed
	stop     func() bool // stops the armed timer
	gen      uint64      // the armed timer's generation: an older timer does nothing
}

func newLane(r *Replicated) lane {
	l := lane{on: r != nil, max: DefaultExpiryInFlight, group: DefaultExpiryGroup, at: math.MaxInt64}
	if r != nil && r.ExpiryInFlight > 0 {
		l.max = r.ExpiryInFlight
	}
	if r != nil && r.ExpiryGroup > 0 {
		l.group = r.ExpiryGroup
	}
	return l
}

// Run drives the expiry sweep every expiry.SweepInterval until Close. In single mode it is
// how leases end (with lazy expiry); in cluster mode the leader's expiry timer ends them
// on time and the sweep is only a backstop that goes through the same lane.
func (n *Node) Run() {
	defer close(n.swept)
	t := time.NewTicker(expiry.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.Sweep()
		}
	}
}

// Sweep frees (single mode) or proposes to free (cluster mode, on the leader) every lease
// that has run out, and lines up each freed key's next waiter. In single mode it holds the
// mutex for at most expiry.SweepChunk expiries at a time; in cluster mode it proposes
// through the expiry lane, so no more than its in-flight bound at once (the rest follow as
// results come back). It returns how many leases it expired or proposed.
func (n *Node) Sweep() (expired int) {
	if n.lane.on {
		n.mu.Lock()
		defer n.mu.Unlock()
		if !n.leading.Load() {
			return 0
		}
		now := n.mono(n.clock.Now())
		expired = n.expireDue(now)
		n.armExpiry(now)
		return expired
	}
	for {
		n.mu.Lock()
		count, more := n.sweepChunk(n.mono(n.clock.Now()))
		n.mu.Unlock()
		expired += count
		if !more {
			return expired
		}
	}
}

// sweepChunk expires at most expiry.SweepChunk leases that are over by now, soonest first,
// and reports how many and whether more are due. The caller holds n.mu. (Single mode.)
func (n *Node) sweepChunk(now int64) (count int, more bool) {
	for range expiry.SweepChunk {
		h, ok := n.view.held.Peek(now)
		if !ok {
			return count, false
		}
		count++
		n.expire(h, now)
		if next, ok := n.view.held.Peek(now); ok && next == h {
			// expire frees, parks or re-times the holder it is given: never here.
			n.log.Error("expiry sweep made no progress; it stops until the next sweep", "key", h.Key)
			return count, false
		}
	}
	_, more = n.view.held.Peek(now)
	return count, more
}

// Close stops the sweep started by Run (if any) and the expiry timer. It does not drain;
// call Drain first.
func (n *Node) Close() {
	n.stopOnce.Do(func() { close(n.stop) })
	n.mu.Lock()
	n.disarmExpiry()
	n.mu.Unlock()
}

// armExpiry makes sure that, on a cluster-mode leader, a timer is set for the view's
// earliest deadline. It sets one only when that deadline is earlier than the armed one, so a
// grant that does not become the earliest costs a comparison; a timer that fires early (its
// holder was released or re-timed) finds nothing due and arms for what is next. While the
// lane is full no timer is needed: the results coming back continue it. Caller holds n.mu.
func (n *Node) armExpiry(now int64) {
	l := &n.lane
	if !l.on || !n.leading.Load() || l.inflight >= l.max {
		return
	}
	next, ok := n.view.held.Next()
	if !ok || next >= l.at {
		return
	}
	n.disarmExpiry()
	l.at = next
	gen := l.gen
	l.stop = n.clock.AfterFunc(time.Duration(next-now), func() { n.expiryDue(gen) })
}

// disarmExpiry stops the expiry timer, if one is armed. Caller holds n.mu.
func (n *Node) disarmExpiry() {
	l := &n.lane
	if l.stop != nil {
		l.stop()
		l.stop = nil
	}
	l.at = math.MaxInt64
	l.gen++ // a timer already running finds itself stale
}

// expiryDue is the expiry timer: it proposes every expiry due now (as many as the lane
// takes) and arms the timer for the next deadline.
func (n *Node) expiryDue(gen uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := &n.lane
	if gen != l.gen {
		return
	}
	l.stop, l.at = nil, math.MaxInt64
	l.gen++
	now := n.mono(n.clock.Now())
	n.expireDue(now)
	n.armExpiry(now)
}

// expireDue proposes the expiry of holders due by now, soonest first, each with the grant to
// its key's next waiter, in groups of at most lane.group commands (one log entry each),
// while fewer than lane.max of its expiries are in flight. It returns how many it proposed.
// Caller holds n.mu, on a cluster-mode leader.
func (n *Node) expireDue(now int64) (count int) {
	l := &n.lane
	for l.inflight < l.max {
		if _, ok := n.view.held.Peek(now); !ok {
			return count
		}
		n.ap.begin()
		for l.inflight < l.max && n.ap.grouped()+2 <= l.group {
			h, ok := n.view.held.Peek(now)
			if !ok {
				break
			}
			n.proposeExpire(h, now, true)
			count++
		}
		n.ap.end()
	}
	return count
}

// expire frees h's key because its lease ran out (the single-mode sweep, and lazy expiry in
// both modes): an Expire command for exactly h's token and the grant to the key's next
// waiter, one group.
func (n *Node) expire(h expiry.Entry, now int64) {
	n.ap.begin()
	n.proposeExpire(h, now, false)
	n.ap.end()
}

// proposeExpire applies an Expire of exactly h's token, which frees the key only if that
// token still holds it, and lines up the next waiter's grant behind it. While it is out the
// holder is parked. (In single mode it is applied before apply returns, and the holder is
// gone.) The caller brackets it with begin and end.
func (n *Node) proposeExpire(h expiry.Entry, now int64, lane bool) {
	op := expOp{key: h.Key, token: tokenOf(h), epoch: n.epoch, lane: lane}
	if lane {
		n.lane.inflight++
	}
	// The Expire names the extension count of the lease that ended: if an extend of the
	// same token applies first, the table keeps the holder (Stale) and the view resyncs.
	cmd := fsm.Command{Kind: fsm.CmdExpire, Key: []byte(op.key), Token: op.token, Extensions: n.view.extOf(h.Key)}
	n.ap.apply(cmd, then{kind: fsm.CmdExpire, exp: op})
	n.view.held.Park(h.Key, uint64(op.token)) // unless it is gone already
	n.grantNext(h.Key, now)
}

func (n *Node) expired(op expOp, r fsm.Result, err error, now int64) {
	h, ok := n.view.held.Lookup(op.key)
	mine := ok && op.epoch == n.epoch && tokenOf(h) == op.token
	switch {
	case err != nil:
		if mine {
			// Not applied, or not known to be: look again shortly. A lock is never freed
			// before its lease ended, only later. The lease stays over: no extend revives it.
			n.view.held.Arm(op.key, now+int64(retryExpire))
			n.view.ended(op.key)
		}
	case r.Kind == fsm.Expired:
		n.m.expired.Inc()
		if n.audit.on() {
			n.audit.release("expire", []byte(op.key), op.token, "expired", origin{from: "leader"})
		}
		if mine {
			n.holderGone(op.key, now)
		}
	case mine:
		// Stale for the view's own holder: no release of it is out (parking kept them apart),
		// so the view missed a change; the log is right.
		n.resync(h, r.Holder, now)
	}
	if l := &n.lane; op.lane && op.epoch == n.epoch {
		l.inflight--
		// Go on once a whole group fits again (or the lane is empty).
		if n.leading.Load() && l.max-l.inflight >= min(l.group, l.max) {
			n.expireDue(now)
		}
	}
}
