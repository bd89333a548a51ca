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
		now := n.mono(n.clock.Now())
		_, more := expiry.PopDue(&n.view.heap, now, expiry.SweepChunk, func(it *expiry.Item) {
			ks := n.view.keys[it.Key]
			if ks == nil || &ks.item != it || ks.ending {
				return // stale: not the key's current holder any more
			}
			expired++
			n.expire(ks, now)
		})
		n.mu.Unlock()
		if !more {
			return expired
		}
	}
}

// Close stops the sweep started by Run (if any). It does not drain; call Drain first.
func (n *Node) Close() {
	n.stopOnce.Do(func() { close(n.stop) })
}

// expire frees ks because its lease ran out: an Expire command for exactly the current
// holder's token, which frees the key only if that token still holds it.
func (n *Node) expire(ks *keyState, now int64) {
	n.view.heap.Remove(&ks.item)
	ks.ending = true
	op := expOp{key: ks.item.Key, token: fsm.Token(ks.item.Token), epoch: n.epoch}
	n.ap.begin()
	n.ap.apply(fsm.Command{Kind: fsm.CmdExpire, Key: []byte(op.key), Token: op.token}, then{kind: fsm.CmdExpire, exp: op})
	n.grantNext(ks, now)
	n.ap.end()
}

func (n *Node) expired(op expOp, r fsm.Result, err error, now int64) {
	ks := n.view.keys[op.key]
	mine := ks != nil && op.epoch == n.epoch && fsm.Token(ks.item.Token) == op.token
	switch {
	case err != nil:
		if mine {
			// Not applied, or not known to be: look again shortly. A lock is never freed
			// before its lease ended, only later.
			ks.ending = false
			ks.item.Deadline = now + int64(retryExpire)
			n.view.heap.Push(&ks.item)
		}
	case r.Kind == fsm.Expired:
		n.m.expired.Inc()
		if mine {
			n.holderGone(ks, now)
		}
	case mine:
		// Stale for the view's own holder: no release of it is out (ending kept them apart),
		// so the view missed a change; the log is right.
		n.resync(ks, r.Holder, now)
	}
}
