package client

import "sync"

// queue is the local queue of unsent calls, shared by the writers of every connection. A
// call in it is guaranteed unsent. It is a doubly linked list so that a call whose deadline
// passes, or whose caller gives up, leaves it at once and frees its slot.
//
// Lock order: queue.mu before call.mu; conn.mu is never held together with queue.mu.
type queue struct {
	mu         sync.Mutex
	head, tail *call
	n          int // calls in the list
	bounded    int // of which count against the bound
	limit      int
	writers    map[*conn]chan<- struct{} // writers to wake on a push

	// Closing (see Client.Close): closed refuses new calls from callers; hardClosed refuses
	// everything, compensations included. comps counts compensations in progress; compsDone
	// is signalled when it drops.
	closed, hardClosed bool
	comps              int
	compsDone          *sync.Cond
}

func newQueue(limit int) *queue {
	q := &queue{limit: limit, writers: map[*conn]chan<- struct{}{}}
	q.compsDone = sync.NewCond(&q.mu)
	return q
}

// pushLocked appends c (or puts it first, for a call that was already queued once) and wakes
// every writer. q.mu and c.mu are held.
func (q *queue) pushLocked(c *call, front bool) {
	q.linkLocked(c, front)
	q.wakeLocked()
}

// wakeLocked wakes every writer. q.mu is held.
func (q *queue) wakeLocked() {
	for _, w := range q.writers {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// idleLocked returns a connection whose write turn the caller now holds, or nil when every
// connection is busy writing (or there is none). q.mu is held.
func (q *queue) idleLocked() *conn {
	for cn := range q.writers {
		if cn.turn.TryLock() {
			return cn
		}
	}
	return nil
}

// linkLocked appends c, or puts it first. q.mu and c.mu are held.
func (q *queue) linkLocked(c *call, front bool) {
	c.state, c.cn = stateQueued, nil
	c.inQueue = true
	prev, next := q.tail, (*call)(nil)
	if front {
		prev, next = nil, q.head
	}
	q.join(prev, c)
	q.join(c, next)
	q.n++
	if c.bounded {
		q.bounded++
	}
}

// removeLocked unlinks c, if it is still linked (Close and an authentication failure unlink
// calls before finishing them). q.mu is held.
func (q *queue) removeLocked(c *call) {
	if !c.inQueue {
		return
	}
	q.join(c.prev, c.next)
	c.prev, c.next, c.inQueue = nil, nil, false
	q.n--
	if c.bounded {
		q.bounded--
	}
}

// join makes b follow a in the queue: a nil a makes b the head, a nil b makes a the tail.
// q.mu is held.
func (q *queue) join(a, b *call) {
	if a != nil {
		a.next = b
	} else {
		q.head = b
	}
	if b != nil {
		b.prev = a
	} else {
		q.tail = a
	}
}

// register makes w receive a wake-up on every push.
func (q *queue) register(cn *conn, w chan<- struct{}) {
	q.mu.Lock()
	q.writers[cn] = w
	q.mu.Unlock()
}

func (q *queue) unregister(cn *conn) {
	q.mu.Lock()
	delete(q.writers, cn)
	q.mu.Unlock()
}

// removeAllLocked unlinks and returns every queued call for which take is true. q.mu is held.
func (q *queue) removeAllLocked(take func(*call) bool) []*call {
	var out []*call
	for c := q.head; c != nil; {
		next := c.next
		if take(c) {
			q.removeLocked(c)
			out = append(out, c)
		}
		c = next
	}
	return out
}

func (q *queue) len() (n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}
