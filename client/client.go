package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/wire"
)

// Client is a pool of connections to latch servers. It is safe for concurrent use; one
// Client per process is usual. New starts connecting in the background at once.
type Client struct {
	cfg    Config
	clock  Clock
	ppb    uint64 // Config.Rho in parts per billion (deadline.go)
	log    *slog.Logger
	q      *queue
	owners owners
	st     counters

	// ctx is canceled by Close: it aborts dials and handshakes in progress.
	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{}  // closed by Close when the slots must end
	wg     sync.WaitGroup // slots
	compWG sync.WaitGroup // compensating releases; Add only under q.mu while !q.hardClosed
	once   sync.Once
	closed atomic.Bool

	// dial opens the transport to a server; tests replace it.
	dial func(ctx context.Context, addr string) (net.Conn, error)

	// Pool state (pool.go). pmu is a leaf lock: nothing else is locked while holding it.
	pmu      sync.Mutex
	servers  []serverState
	conns    map[*conn]struct{}
	revised  int         // of conns, those on which revision 2 is in force (conn.leases)
	authDown atomic.Bool // every server refused our handshake and no connection is up
}

// AcquireOptions are the optional parts of an acquire.
type AcquireOptions struct {
	// Wait is how long the whole acquire may take, queueing and reconnecting included; the
	// server queues the request (FIFO per key) for what is left of it. It is rounded up to
	// whole seconds and must then be 0..255 s. 0 means one immediate attempt: if the lock is
	// held, ErrTimeout at once.
	Wait time.Duration
	// Lease is how long the lock is held unless released, rounded up to whole seconds, then
	// 1..3600 s. 0 means DefaultLease (30 s). It must cover the work, unless the servers offer
	// protocol revision 2: then Ticket.Extend and Ticket.KeepAlive renew it.
	Lease time.Duration
}

// New checks cfg and returns a client. It does not wait for any server: each of the
// Config.Conns connections is dialed in the background at once and redialed whenever it
// dies, so calls made before a connection is up wait in the local queue (within their
// deadline). Close it when done.
func New(cfg Config) (*Client, error) { return newClient(cfg, nil) }

// newClient is New with a replaceable transport dialer, for tests.
func newClient(cfg Config, dial func(ctx context.Context, addr string) (net.Conn, error)) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := &Client{
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger, ppb: rhoPPB(cfg.Rho),
		q:      newQueue(cfg.QueueSize),
		ctx:    ctx,
		cancel: cancel,
		stop:   make(chan struct{}),
		conns:  map[*conn]struct{}{},
	}
	cl.dial = dial
	if dial == nil {
		cl.dial = cl.dialTCP
	}
	cl.owners.next.Store(cfg.FirstOwner)
	cl.servers = make([]serverState, len(cfg.Servers))
	cl.start()
	return cl, nil
}

// start runs the connection slots.
func (cl *Client) start() {
	for i := range cl.cfg.Conns {
		cl.wg.Add(1)
		go cl.runSlot(i)
	}
}

// prepare makes the call for a request started at start with its own time bound, shortened by
// ctx's deadline. It fails closed once the owner counter is exhausted.
func (cl *Client) prepare(ctx context.Context, k kind, start time.Time, bound time.Duration, internal bool) (*call, error) {
	if cl.closed.Load() && !internal { // a compensating release may still go out while Close waits for it
		return nil, ErrClosed
	}
	owner, ok := cl.owners.take()
	if !ok {
		return nil, ErrOwnerExhausted
	}
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: not acquired (guaranteed unsent: the context's deadline had passed): %w", ErrTimeout, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrCanceled, context.Cause(ctx))
	}
	deadline, ctxBound := start.Add(bound), false
	if dl, ok := ctx.Deadline(); ok {
		if d := start.Add(time.Until(dl)); d.Before(deadline) {
			deadline, ctxBound = d, true
		}
	}
	c := newCall(k, owner, deadline)
	c.ctxBound = ctxBound
	return c, nil
}

// Acquire takes the lock named key and returns its ticket, or why not. minWorkBudget is the
// time the caller needs under the lock (critical work, expected pauses, finishing a commit
// or rollback): 0..250 s after rounding up, and at most the lease. A grant that arrives with
// less lease left than that, or after the deadline, is released again in the background and
// reported as ErrIndeterminate; so a budget equal to the lease is accepted but can never be
// met (the lease is reckoned from the write, and the answer takes time): leave room for the
// round trip. See the package documentation for every result.
func (cl *Client) Acquire(ctx context.Context, key string, minWorkBudget time.Duration, o AcquireOptions) (*Ticket, error) {
	r, err := normalize(key, minWorkBudget, o)
	if err != nil {
		return nil, err
	}
	bound := time.Duration(r.wait) * time.Second
	if r.wait == 0 {
		bound = ioTimeout
	}
	c, err := cl.prepare(ctx, kindAcquire, cl.clock.Now(), bound, false)
	if err != nil {
		return nil, err
	}
	c.key, c.lease, c.wait0, c.bounded = r.key, r.lease, r.wait == 0, true
	if err := cl.submit(c, false); err != nil {
		return nil, err
	}
	cl.await(ctx, c)
	t, err := cl.acquired(c, r)
	if err == nil {
		cl.st.acquired.Add(1)
	}
	cl.st.count(err)
	return t, err
}

// acquired turns the settled call into a ticket at the delivery gate, or into an error.
func (cl *Client) acquired(c *call, r request) (*Ticket, error) {
	c.mu.Lock()
	res, err, writtenAt, seen := c.res, c.err, c.writtenAt, c.seen
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	switch res.Op {
	case wire.OpAcquire, wire.OpGranted:
		// The delivery gate. The lease is reckoned from when the frame was written, which is
		// no later than when the server read it: on latch/1 (A) as written_at + lease, on
		// revision 2 (G) with the age and the clock margin rho (grantEnd).
		now := cl.clock.Now()
		end := writtenAt.Add(time.Duration(r.lease) * time.Second)
		if res.Op == wire.OpGranted {
			end = grantEnd(writtenAt, writtenAt.Add(seen), res.Age, r.lease, cl.ppb)
		}
		why := ""
		if !now.Before(c.deadline) {
			why = fmt.Sprintf("granted token %d arrived %v after the deadline", res.Token, now.Sub(c.deadline))
		} else if left := end.Sub(now); left < r.budget {
			why = fmt.Sprintf("granted token %d has %v of lease left, less than the min work budget %v", res.Token, left, r.budget)
		}
		if why != "" {
			comp := cl.compensate(r.key, res.Token, why)
			return nil, withCompensation(comp, "%w: %s; it is being released in the background", ErrIndeterminate, why)
		}
		return cl.newTicket(r.key, res.Token, end, r.lease), nil
	case wire.OpTimeout:
		return nil, fmt.Errorf("%w: not acquired: the server answered T, the lock stayed held for the whole wait; retry later or wait longer", ErrTimeout)
	case wire.OpBusy:
		return nil, ErrBusy
	}
	return nil, &ServerError{Reason: res.Reason}
}

// Release frees the lock key if token still holds it. It has IOTimeout (5 s) from the call,
// reconnects and resends included; ctx may shorten that. Results:
//   - nil: released (R);
//   - ErrNotHeld: nothing held with this token (already expired or released, or not the
//     current token). After a resend it may also be this release's own first attempt that
//     freed it; the message says so;
//   - ErrIndeterminate: it may or may not have been released; the lock ends with its lease;
//   - ErrTimeout (guaranteed unsent) or ErrUnavailable: definitely not released, nothing or
//     only refused requests reached a server; the lock, if held, ends with its lease;
//   - ErrBadKey, ErrCanceled, ErrClosed, ErrOwnerExhausted: nothing was sent.
//
// A token of 0 or above 2^63-1 is never granted: ErrNotHeld without sending.
func (cl *Client) Release(ctx context.Context, key string, token uint64) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := CheckToken(token); err != nil {
		return err
	}
	err := cl.release(ctx, key, token, cl.clock.Now(), false)
	if err == nil {
		cl.st.released.Add(1)
	}
	cl.st.count(err)
	return err
}

func (cl *Client) release(ctx context.Context, key string, token uint64, start time.Time, internal bool) error {
	c, err := cl.prepare(ctx, kindRelease, start, ioTimeout, internal)
	if err != nil {
		return err
	}
	c.key, c.token = key, token
	res, err := cl.exchange(ctx, c, internal)
	if err != nil {
		return err
	}
	switch res.Op {
	case wire.OpRelease:
		return nil
	case wire.OpNotHeld:
		c.mu.Lock()
		resent := c.sent
		c.mu.Unlock()
		if resent {
			return fmt.Errorf("%w (answered to a resend: an earlier attempt may have released it)", ErrNotHeld)
		}
		return ErrNotHeld
	}
	return &ServerError{Reason: res.Reason}
}

// Ping checks that a server answers on one of the pool's connections, within IOTimeout (or
// ctx's deadline, if sooner). It waits for a connection like any request.
func (cl *Client) Ping(ctx context.Context) error {
	c, err := cl.prepare(ctx, kindPing, cl.clock.Now(), ioTimeout, false)
	if err != nil {
		return err
	}
	c.bounded = true
	res, err := cl.exchange(ctx, c, false)
	if err != nil {
		return err
	}
	if res.Op == wire.OpError {
		return &ServerError{Reason: res.Reason}
	}
	return nil
}

// exchange submits c, waits until it is settled and returns its answer or error.
func (cl *Client) exchange(ctx context.Context, c *call, internal bool) (wire.Response, error) {
	if err := cl.submit(c, internal); err != nil {
		return wire.Response{}, err
	}
	cl.await(ctx, c)
	return c.result()
}

// compensate releases a granted token the caller will never see, in the background, with
// IOTimeout from now. When CompensationQueue releases are in progress already, or the client
// is closing, the token is left to end with its lease (counted as dropped). The Compensation
// it returns reports the outcome.
func (cl *Client) compensate(key string, token uint64, reason string) *Compensation {
	comp := &Compensation{Key: key, Token: token, Reason: reason, done: make(chan struct{})}
	q := cl.q
	q.mu.Lock()
	admit := !q.hardClosed && q.comps < cl.cfg.CompensationQueue
	if admit {
		q.comps++
		cl.compWG.Add(1)
	}
	q.mu.Unlock()
	if !admit {
		cl.st.compDropped.Add(1)
		cl.log.Warn("latch client: compensation queue full; token left to its lease", "key", key, "token", token)
		comp.settle(ErrCompensationDropped)
		return comp
	}
	cl.st.compSent.Add(1)
	start := cl.clock.Now()
	go func() {
		defer cl.compWG.Done()
		err := cl.release(context.Background(), key, token, start, true)
		if err == nil || errors.Is(err, ErrNotHeld) {
			err = nil
			cl.st.compSucceeded.Add(1)
		} else {
			cl.st.compFailed.Add(1)
			cl.log.Warn("latch client: compensating release failed; token left to its lease", "key", key, "token", token, "error", err)
		}
		q.mu.Lock()
		q.comps--
		q.compsDone.Broadcast()
		q.mu.Unlock()
		comp.settle(err)
	}()
	return comp
}

// Close fails every queued acquire and ping (never sent: ErrClosed), waits for compensating
// releases in progress (each ends within IOTimeout; Close waits at most closeGrace of real
// time for them), then closes the connections: acquires still waiting for an answer return
// ErrIndeterminate. Later calls return ErrClosed. Close always returns nil; calling it again
// does nothing.
func (cl *Client) Close() error {
	cl.once.Do(func() {
		cl.closed.Store(true)
		q := cl.q
		q.mu.Lock()
		q.closed = true
		dropped := q.removeAllLocked(func(c *call) bool { return c.kind != kindRelease })
		q.mu.Unlock()
		cl.finishAll(dropped, cl.closedErr)

		expired := false
		timer := time.AfterFunc(closeGrace, func() {
			q.mu.Lock()
			expired = true
			q.compsDone.Broadcast()
			q.mu.Unlock()
		})
		q.mu.Lock()
		for q.comps > 0 && !expired {
			q.compsDone.Wait()
		}
		q.hardClosed = true
		rest := q.removeAllLocked(func(*call) bool { return true })
		q.mu.Unlock()
		cl.finishAll(rest, cl.closedErr)

		cl.cancel()
		close(cl.stop)
		cl.pmu.Lock()
		conns := make([]*conn, 0, len(cl.conns))
		for cn := range cl.conns {
			conns = append(conns, cn)
		}
		cl.pmu.Unlock()
		timer.Stop()
		for _, cn := range conns {
			cn.close(ErrClosed)
		}
		cl.wg.Wait()
		cl.compWG.Wait() // they end at once now: unsent or lost, with nothing to send them
	})
	return nil
}

// finishAll settles calls taken out of the queue with errFor's error.
func (cl *Client) finishAll(calls []*call, errFor func(*call) error) {
	for _, c := range calls {
		c.mu.Lock()
		if c.state == stateQueued {
			c.finishLocked(wire.Response{}, errFor(c))
		}
		c.mu.Unlock()
	}
}

// closeGrace bounds, in real time, how long Close waits for compensating releases.
const closeGrace = IOTimeout + time.Second

// Stats are the client's counters since New, for metrics and tests.
type Stats struct {
	Acquired      uint64 // tickets handed out
	Timeouts      uint64 // ErrTimeout results (T, or unsent at the deadline) that are not ErrUnavailable
	Busy          uint64 // ErrBusy results
	Indeterminate uint64 // ErrIndeterminate results of Acquire and Release
	Unavailable   uint64 // ErrUnavailable results (no server took the call)
	Released      uint64 // Release calls answered R
	NotHeld       uint64 // Release calls answered N
	Extended      uint64 // extends answered L that moved a ticket's deadline
	ExtendNotHeld uint64 // extends answered N: the ticket was lost

	CompensationsSent      uint64 // compensating releases started
	CompensationsSucceeded uint64 // ... answered R or N: the token holds nothing any more
	CompensationsFailed    uint64 // ... without such an answer in time: left to the lease
	CompensationsDropped   uint64 // not started because the compensation queue was full

	Failovers        uint64 // requests put back in the queue to be sent by another connection
	Connects         uint64 // handshakes completed
	Reconnects       uint64 // of which replaced an earlier connection of the same slot
	DialFailures     uint64 // dials or handshakes that failed
	UnknownResponses uint64 // answers for no pending owner, ignored
	ConnsOpen        int    // connections up now
	ConnsRevised     int    // of which carry protocol revision 2 (the server echoed the offer)
	Queued           int    // requests in the local queue now (all unsent)
	OwnerExhausted   bool   // the owner counter wrapped: the client fails closed
}

// Stats returns a snapshot of the counters.
func (cl *Client) Stats() Stats {
	s := cl.st.snapshot()
	cl.pmu.Lock()
	s.ConnsOpen, s.ConnsRevised = len(cl.conns), cl.revised
	cl.pmu.Unlock()
	s.Queued = cl.q.len()
	s.OwnerExhausted = cl.owners.exhausted()
	return s
}

// counters are the atomic counters behind Stats.
type counters struct {
	acquired, timeouts, busy, indeterminate, unavailable, released, notHeld atomic.Uint64
	extended, extendNotHeld                                                 atomic.Uint64
	compSent, compSucceeded, compFailed, compDropped                        atomic.Uint64
	failovers, connects, reconnects, dialFailures, unknownResponses         atomic.Uint64
}

// count records the result of an acquire or release.
func (s *counters) count(err error) {
	switch {
	case err == nil:
	case errors.Is(err, ErrIndeterminate):
		s.indeterminate.Add(1)
	case errors.Is(err, ErrUnavailable): // before ErrTimeout: no server took it
		s.unavailable.Add(1)
	case errors.Is(err, ErrTimeout):
		s.timeouts.Add(1)
	case errors.Is(err, ErrBusy):
		s.busy.Add(1)
	case errors.Is(err, ErrNotHeld):
		s.notHeld.Add(1)
	}
}

func (s *counters) snapshot() Stats {
	return Stats{
		Acquired: s.acquired.Load(), Timeouts: s.timeouts.Load(), Busy: s.busy.Load(),
		Indeterminate: s.indeterminate.Load(), Unavailable: s.unavailable.Load(),
		Released: s.released.Load(), NotHeld: s.notHeld.Load(),
		Extended: s.extended.Load(), ExtendNotHeld: s.extendNotHeld.Load(),
		CompensationsSent: s.compSent.Load(), CompensationsSucceeded: s.compSucceeded.Load(),
		CompensationsFailed: s.compFailed.Load(), CompensationsDropped: s.compDropped.Load(),
		Failovers: s.failovers.Load(), Connects: s.connects.Load(), Reconnects: s.reconnects.Load(),
		DialFailures: s.dialFailures.Load(), UnknownResponses: s.unknownResponses.Load(),
	}
}
