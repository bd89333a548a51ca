package cluster

import (
	"time"

	"github.com/latchd/latch/expiry"
	"github.com/latchd/latch/fsm"
)

// retryExpire is how long an expiry that could not be proposed waits before it is tried
// again (the lease stays over; the lock is only freed later, never earlier).
const retryExpire = time.Second

// Run drives the expiry sweep every expiry.SweepInterval until Close.
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
// that has run out, and lines up each freed key's next waiter. It holds the mutex for at most
// expiry.SweepChunk expiries at a time. It returns how many leases it expired or proposed.
func (n *Node) Sweep() (expired int) {
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
// and reports how many and whether more are due. The caller holds n.mu.
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

// Close stops the sweep started by Run (if any). It does not drain; call Drain first.
func (n *Node) Close() {
	n.stopOnce.Do(func() { close(n.stop) })
}

// expire frees h's key because its lease ran out: an Expire command for exactly h's token,
// which frees the key only if that token still holds it. While it is out the holder is
// parked. (In single mode it is applied before apply returns, and the holder is gone.)
func (n *Node) expire(h expiry.Entry, now int64) {
	op := expOp{key: h.Key, token: tokenOf(h), epoch: n.epoch}
	n.ap.begin()
	n.ap.apply(fsm.Command{Kind: fsm.CmdExpire, Key: []byte(op.key), Token: op.token}, then{kind: fsm.CmdExpire, exp: op})
	n.view.held.Park(h.Key, uint64(op.token)) // unless it is gone already
	n.grantNext(h.Key, now)
	n.ap.end()
}

func (n *Node) expired(op expOp, r fsm.Result, err error, now int64) {
	h, ok := n.view.held.Lookup(op.key)
	mine := ok && op.epoch == n.epoch && tokenOf(h) == op.token
	switch {
	case err != nil:
		if mine {
			// Not applied, or not known to be: look again shortly. A lock is never freed
			// before its lease ended, only later.
			n.view.held.Arm(op.key, now+int64(retryExpire))
		}
	case r.Kind == fsm.Expired:
		n.m.expired.Inc()
		if mine {
			n.holderGone(op.key, now)
		}
	case mine:
		// Stale for the view's own holder: no release of it is out (parking kept them apart),
		// so the view missed a change; the log is right.
		n.resync(h, r.Holder, now)
	}
}
