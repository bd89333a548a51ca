package cluster

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/expiry"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// Replier delivers responses to one client connection. The node calls Reply with its mutex
// held, from whichever goroutine made the decision (a session's reader, a waiter's timer, the
// sweep), so Reply must queue and return at once; a closed connection drops the response.
type Replier interface {
	Reply(r wire.Response)
}

// Conn is the node's handle on one client connection: where its answers go and which of
// its acquires are still waiting. Get one with Attach, give it back with Detach.
type Conn struct {
	out     Replier
	waiting map[*waiter]struct{}
	gone    bool
}

// keyState is the node's runtime state of a held key: the lease deadline of the current
// holder (an item of the expiry heap) and the FIFO of acquires waiting for it.
type keyState struct {
	item expiry.Item
	q    *queue // nil until someone waits
}

// Node decides acquires and releases for one lock table. All of its methods are safe for
// concurrent use; decisions are serialised by one mutex, which is never held across I/O.
type Node struct {
	mu       sync.Mutex
	table    *fsm.Table
	keys     map[string]*keyState
	heap     expiry.Heap
	pending  int // acquires received and not answered (waiters included)
	waiters  int // live waiters over all keys
	gates    [3]Gate
	draining bool

	clock Clock
	epoch time.Time
	log   hclog.Logger
	m     *Metrics

	stop     chan struct{}
	stopOnce sync.Once
	swept    chan struct{}
}

const (
	gatePending = iota
	gateKeys
	gateWaiters
)

// NewNode returns a single-mode node: commands are applied in place to an in-memory table.
// Call Run to start the expiry sweep and Close to stop it.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	table, err := fsm.NewTable(fsm.Token(cfg.TokenFloor))
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	n := &Node{
		table: table,
		keys:  make(map[string]*keyState),
		gates: [3]Gate{{Limit: cfg.MaxPending}, {Limit: cfg.MaxKeys}, {Limit: cfg.MaxWaiters}},
		clock: cfg.Clock,
		epoch: cfg.Clock.Now(),
		log:   cfg.Logger,
		m:     cfg.Metrics,
		stop:  make(chan struct{}),
		swept: make(chan struct{}),
	}
	n.registerGauges()
	return n, nil
}

// mono converts t to nanoseconds since the node's epoch (monotonic when t carries a
// monotonic reading, as time.Now does).
func (n *Node) mono(t time.Time) int64 { return int64(t.Sub(n.epoch)) }

// Attach registers a client connection whose answers go to out.
func (n *Node) Attach(out Replier) *Conn { return &Conn{out: out} }

// Detach forgets a closed connection: its waiters are dropped (they were never granted, so
// nothing is lost), and later decisions send it nothing. Closing a connection releases no lock.
func (n *Node) Detach(c *Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c.gone = true
	for w := range c.waiting {
		n.retire(w, true)
		n.m.waitCancelled.Inc()
	}
	c.waiting = nil
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
	if n.draining {
		n.m.acqUnavailable.Inc()
		n.m.FrameError(wire.ReasonUnavailable)
		c.out.Reply(wire.Response{Op: wire.OpError, Owner: owner, Reason: wire.ReasonUnavailable})
		return
	}
	if n.table.Exhausted() {
		// Section 4: once the last token is issued every acquire fails, held key or not.
		n.m.acqExhausted.Inc()
		n.m.FrameError(wire.ReasonTokenExhausted)
		c.out.Reply(wire.Response{Op: wire.OpError, Owner: owner, Reason: wire.ReasonTokenExhausted})
		return
	}
	now := n.mono(n.clock.Now())
	ks := n.keys[string(key)]
	if ks != nil && ks.item.Deadline <= now {
		n.expire(ks, now) // lazily: the lease is over even if the sweep has not run yet
		ks = n.keys[string(key)]
	}
	if !n.gates[gatePending].Admit(n.pending) {
		n.busy(c, owner, n.m.busyPending)
		return
	}
	if ks == nil {
		if !n.gates[gateKeys].Admit(n.table.Len()) {
			n.busy(c, owner, n.m.busyKeys)
			return
		}
		n.grant(c, owner, key, lease, now, n.mono(readAt), nil)
		return
	}
	if wait == 0 {
		n.m.acqTimeout.Inc()
		c.out.Reply(wire.Response{Op: wire.OpTimeout, Owner: owner})
		return
	}
	if !n.gates[gateWaiters].Admit(n.waiters) {
		n.busy(c, owner, n.m.busyWaiters)
		return
	}
	readNs := n.mono(readAt)
	left := time.Duration(readNs + int64(wait)*int64(time.Second) - now)
	if left <= 0 {
		n.m.acqTimeout.Inc()
		c.out.Reply(wire.Response{Op: wire.OpTimeout, Owner: owner})
		return
	}
	w := &waiter{c: c, owner: owner, lease: lease, readAt: readNs, ks: ks}
	if ks.q == nil {
		ks.q = &queue{}
	}
	ks.q.push(w)
	if c.waiting == nil {
		c.waiting = make(map[*waiter]struct{})
	}
	c.waiting[w] = struct{}{}
	n.waiters++
	n.pending++
	w.stop = n.clock.AfterFunc(left, func() { n.waitTimedOut(w) })
}

// Release decides a release frame: R if token is the key's current holder, else N.
func (n *Node) Release(c *Conn, owner uint64, key []byte, token uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.mono(n.clock.Now())
	ks := n.keys[string(key)]
	if ks != nil && ks.item.Deadline <= now {
		n.expire(ks, now) // the lease ran out: the lock was free before this release arrived
		ks = nil
	}
	if ks == nil || !n.table.Release(key, fsm.Token(token)) {
		n.m.relNotHeld.Inc()
		c.out.Reply(wire.Response{Op: wire.OpNotHeld, Owner: owner})
		return
	}
	n.heap.Remove(&ks.item)
	n.m.relReleased.Inc()
	c.out.Reply(wire.Response{Op: wire.OpRelease, Owner: owner})
	n.freed(ks, now)
}

// grant gives the free key to a new holder and answers A (or E token_exhausted).
// ks is the key's state when it has waiters left from the previous holder, else nil.
func (n *Node) grant(c *Conn, owner uint64, key []byte, lease uint16, now, readAt int64, ks *keyState) bool {
	tok, k, err := n.table.Acquire(key, lease)
	if err != nil {
		reason := wire.ReasonInternal
		if errors.Is(err, fsm.ErrTokenExhausted) {
			reason = wire.ReasonTokenExhausted
			n.m.acqExhausted.Inc()
		} else {
			n.log.Error("acquire failed on a free key", "error", err)
		}
		n.m.FrameError(reason)
		c.out.Reply(wire.Response{Op: wire.OpError, Owner: owner, Reason: reason})
		return false
	}
	if ks == nil {
		ks = &keyState{}
	}
	ks.item.Key = k
	ks.item.Token = uint64(tok)
	ks.item.Deadline = now + int64(lease)*int64(time.Second)
	n.keys[k] = ks
	n.heap.Push(&ks.item)
	n.m.acqAcquired.Inc()
	n.m.grantLatency.Observe(time.Duration(now - readAt).Seconds())
	c.out.Reply(wire.Response{Op: wire.OpAcquire, Owner: owner, Token: uint64(tok)})
	if n.table.Exhausted() {
		n.log.Error("token counter exhausted: every later acquire fails with token_exhausted", "last_token", uint64(tok))
		n.failWaiters(wire.ReasonTokenExhausted)
	}
	return true
}

// failWaiters answers every live waiter E reason and empties every queue: no waiter can be
// granted any more (the node drains, or the token counter is exhausted).
func (n *Node) failWaiters(reason wire.Reason) {
	for _, ks := range n.keys {
		if ks.q == nil {
			continue
		}
		for _, w := range ks.q.ws[ks.q.head:] {
			if w.done {
				continue
			}
			n.retire(w, false) // the whole queue is dropped below
			if reason == wire.ReasonUnavailable {
				n.m.acqUnavailable.Inc()
			} else {
				n.m.acqExhausted.Inc()
			}
			n.m.FrameError(reason)
			if !w.c.gone {
				w.c.out.Reply(wire.Response{Op: wire.OpError, Owner: w.owner, Reason: reason})
			}
		}
		ks.q = nil
	}
}

// expire frees ks because its lease ran out, then hands the key to its next waiter.
func (n *Node) expire(ks *keyState, now int64) {
	n.heap.Remove(&ks.item)
	if !n.table.Expire(ks.item.Key, fsm.Token(ks.item.Token)) {
		// The heap and the table disagree: a bug. Keep the table's word.
		n.log.Error("expiry found the key held by another token", "key", ks.item.Key, "token", ks.item.Token)
		return
	}
	n.m.expired.Inc()
	n.freed(ks, now)
}

// freed runs after ks's holder is gone: the next live waiter is granted at once, in FIFO
// order; without one the key's state is dropped.
func (n *Node) freed(ks *keyState, now int64) {
	key := ks.item.Key
	for ks.q != nil {
		w := ks.q.pop()
		if w == nil {
			ks.q = nil
			break
		}
		if w.done {
			continue
		}
		n.retire(w, false)
		if n.grant(w.c, w.owner, []byte(key), w.lease, now, w.readAt, ks) {
			if ks.q.empty() {
				ks.q = nil
			}
			return
		}
	}
	delete(n.keys, key)
}

// retire takes a live waiter out of the counts (it is being granted, timed out, cancelled
// or answered unavailable). queued says it still sits in its key's queue, where its slot is
// then skipped later.
func (n *Node) retire(w *waiter, queued bool) {
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
	if w.done {
		return // granted or cancelled while the timer fired
	}
	n.retire(w, true)
	n.m.acqTimeout.Inc()
	if !w.c.gone {
		w.c.out.Reply(wire.Response{Op: wire.OpTimeout, Owner: w.owner})
	}
}

func (n *Node) busy(c *Conn, owner uint64, gate prometheus.Counter) {
	gate.Inc()
	n.m.acqBusy.Inc()
	c.out.Reply(wire.Response{Op: wire.OpBusy, Owner: owner})
}

// Drain stops granting: every waiter is answered E unavailable (it was never granted, so a
// client may retry elsewhere) and later acquires get the same. Releases keep working.
func (n *Node) Drain() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.draining = true
	n.failWaiters(wire.ReasonUnavailable)
}

// Run drives the single-mode expiry sweep every expiry.SweepInterval until Close.
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

// Sweep frees every lease that has run out and grants each freed key's next waiter. It
// holds the mutex for at most expiry.SweepChunk expiries at a time.
func (n *Node) Sweep() (freed int) {
	for {
		n.mu.Lock()
		now := n.mono(n.clock.Now())
		_, more := expiry.PopDue(&n.heap, now, expiry.SweepChunk, func(it *expiry.Item) {
			ks := n.keys[it.Key]
			if ks == nil || &ks.item != it || !n.table.Expire(it.Key, fsm.Token(it.Token)) {
				return // stale: the token no longer holds the key
			}
			freed++
			n.m.expired.Inc()
			n.freed(ks, now)
		})
		n.mu.Unlock()
		if !more {
			return freed
		}
	}
}

// Close stops the sweep started by Run (if any). It does not drain; call Drain first.
func (n *Node) Close() {
	n.stopOnce.Do(func() { close(n.stop) })
}

// Stats is a consistent snapshot of the node's gauges.
type Stats struct {
	Keys, Waiters, Pending int
	LastToken              uint64
	PendingGate, KeysGate  bool // closed?
	WaitersGate            bool
	Draining               bool
}

// observeGates re-evaluates every gate against its gauge. The caller holds n.mu.
func (n *Node) observeGates() {
	n.gates[gatePending].Admit(n.pending)
	n.gates[gateKeys].Admit(n.table.Len())
	n.gates[gateWaiters].Admit(n.waiters)
}

// Stats returns the node's gauges, re-evaluating the gates against them.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.observeGates()
	return Stats{
		Keys:        n.table.Len(),
		Waiters:     n.waiters,
		Pending:     n.pending,
		LastToken:   uint64(n.table.LastToken()),
		PendingGate: n.gates[gatePending].Closed(),
		KeysGate:    n.gates[gateKeys].Closed(),
		WaitersGate: n.gates[gateWaiters].Closed(),
		Draining:    n.draining,
	}
}

func (n *Node) registerGauges() {
	gauge := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(n.Stats()) })
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	n.m.Registry.MustRegister(
		gauge("latch_keys", "Keys held in the lock table.", func(s Stats) float64 { return float64(s.Keys) }),
		gauge("latch_waiters", "Acquires queued behind a holder.", func(s Stats) float64 { return float64(s.Waiters) }),
		gauge("latch_pending_acquires", "Acquires received and not yet answered, waiters included.", func(s Stats) float64 { return float64(s.Pending) }),
		gauge("latch_last_token", "The last fencing token issued (the token floor before any grant).", func(s Stats) float64 { return float64(s.LastToken) }),
		gauge("latch_admission_pending_closed", "1 while the pending-acquires gate refuses acquires.", func(s Stats) float64 { return b(s.PendingGate) }),
		gauge("latch_admission_keys_closed", "1 while the keys gate refuses acquires of new keys.", func(s Stats) float64 { return b(s.KeysGate) }),
		gauge("latch_admission_waiters_closed", "1 while the waiters gate refuses acquires that would wait.", func(s Stats) float64 { return b(s.WaitersGate) }),
	)
}

// Now reads the node's clock; sessions stamp the time a frame was read with it.
func (n *Node) Now() time.Time { return n.clock.Now() }
