package cluster

import "github.com/latchd/latch/wire"

// waiter is one acquire queued behind a key's holder. Its fields are guarded by the node's
// mutex; done is set once, when it is granted, times out, is cancelled or is drained.
type waiter struct {
	c        *Session
	owner    uint64
	lease    uint16
	readAt   int64 // when its frame was read (node clock): wait and grant latency count from here
	deadline int64 // readAt + wait
	ks       *keyState
	stop     func() bool // stops its wait timer
	done     bool
	proposed bool // its acquire is in the log (cluster mode): the entry decides, not the timer
}

// queue is the FIFO of waiters of one key. Finished waiters stay in place until they reach
// the head or a compaction drops them, so that timing out is O(1).
type queue struct {
	ws   []*waiter
	head int
	dead int // finished waiters still in ws[head:]
}

func (q *queue) push(w *waiter) { q.ws = append(q.ws, w) }

// pushFront puts a waiter back at the head (its turn came, but the key was not free).
func (q *queue) pushFront(w *waiter) {
	if q.head > 0 {
		q.head--
		q.ws[q.head] = w
		return
	}
	q.ws = append(q.ws, nil)
	copy(q.ws[1:], q.ws)
	q.ws[0] = w
}

// pop returns the next waiter, finished or not, or nil when the queue is empty.
func (q *queue) pop() *waiter {
	if q.head == len(q.ws) {
		return nil
	}
	w := q.ws[q.head]
	q.ws[q.head] = nil
	q.head++
	if w.done {
		q.dead--
	}
	if q.head == len(q.ws) {
		q.ws, q.head = q.ws[:0], 0
	}
	return w
}

func (q *queue) empty() bool { return len(q.ws)-q.head == q.dead }

// live is the number of waiters in the queue that are still waiting.
func (q *queue) live() int { return len(q.ws) - q.head - q.dead }

// compact drops finished waiters once they make up most of the queue, so a key whose
// waiters keep timing out behind a long holder does not grow without bound.
func (q *queue) compact() {
	if q.dead < 32 || q.dead*2 < len(q.ws)-q.head {
		return
	}
	live := q.ws[:0]
	for _, w := range q.ws[q.head:] {
		if !w.done {
			live = append(live, w)
		}
	}
	clear(q.ws[len(live):])
	q.ws, q.head, q.dead = live, 0, 0
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
	if w.c.ended.Load() {
		n.m.acqTimeout.Inc() // nobody to tell, nothing to confirm
		return
	}
	n.fromView(w.c, wire.Response{Op: wire.OpTimeout, Owner: w.owner}, n.m.acqTimeout, "", 0, 0)
}
