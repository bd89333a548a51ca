package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Ticket is a granted lock: its key, its fencing token and a conservative end of its lease.
// Pass Token to every resource written under the lock; stop working by its deadline
// (CurrentDeadline; Deadline until an extension moves it). Its methods are safe for
// concurrent use.
type Ticket struct {
	Key   string
	Token uint64
	// Deadline is when the lease ends at the latest as the client can know it when the
	// ticket is granted: the moment the acquire frame was written (before the server could
	// read it) plus the lease; on a connection with protocol revision 2, plus the age the
	// server reported, with the clock margin Config.Rho (see the package documentation). It
	// carries the monotonic clock reading of the client's clock. It never changes: Extend and
	// KeepAlive move the ticket's deadline, which CurrentDeadline returns.
	Deadline time.Time

	cl *Client

	// mu guards the fields below. It is a leaf lock: nothing else is locked while holding it
	// but the clock's timers and the context's own, and no caller's context is asked
	// anything (the ticket's own Deadline takes it). Fields are few and packed: every acquire
	// allocates a Ticket.
	mu       sync.Mutex
	dl       time.Time // the deadline: Deadline, or the last confirmed extension's
	lease    uint16    // seconds: the acquire's, or the last confirmed extension's
	released bool
	settled  bool // a Release released the lock or found it not held: later ones send nothing
	// ended is why the ticket ended (released, lost, unconfirmed, or its deadline as its
	// context's timer saw it), once it did. It is the cause of the context.
	ended error
	// The context is made on the first Context call: most callers never ask for it, and it
	// costs a timer.
	ctx *leaseContext
	x   *extension // made by the first Extend or KeepAlive
}

// extension is a ticket's state for Extend and KeepAlive, guarded by Ticket.mu.
type extension struct {
	ext *call // the extend in progress, if any (extend.go)
	// pend, while ext may have been applied, is the earliest written_at + new lease of its
	// attempts: a shorter lease shortens the lock, so the deadline is min(dl, pend).
	pend time.Time
	ka   *keepAlive // the keep-alive running, if any (keepalive.go)
}

// xLocked returns t.x, made if need be. t.mu is held.
func (t *Ticket) xLocked() *extension {
	if t.x == nil {
		t.x = &extension{}
	}
	return t.x
}

// Why a ticket ended: the cause of its context (context.Cause), and of the errors of Extend
// and KeepAlive after it. Each wraps one of ErrTicketEnded, ErrTicketLost and
// ErrTicketUnconfirmed.
var (
	// ErrTicketEnded: the ticket was released, or its deadline passed. The work under it must
	// stop. At the deadline the cause is also context.DeadlineExceeded, after Release
	// context.Canceled, as the context's Err says.
	ErrTicketEnded = errors.New("latch: the ticket has ended (released, or its deadline passed)")
	// ErrTicketLost: the server answered an extend with N: this token does not hold the lock
	// any more (its lease ended, it was released or force-released, or another token holds
	// it). Stop the work at once; a resource that checks the fencing token refuses this one
	// once a newer token has written.
	ErrTicketLost = errors.New("latch: the ticket is lost: the server says its token no longer holds the lock; stop the work now")
	// ErrTicketUnconfirmed: the keep-alive got no extension confirmed before the deadline
	// neared (or one failed definitely: unsupported, client closed). The lease may still run
	// until the deadline, but nothing promises more: stop the work.
	ErrTicketUnconfirmed = errors.New("latch: the ticket's keep-alive could not confirm an extension before its deadline neared; stop the work")

	errReleasedCause = fmt.Errorf("%w: released: %w", ErrTicketEnded, context.Canceled)
	errDeadlineCause = fmt.Errorf("%w: its deadline passed: %w", ErrTicketEnded, context.DeadlineExceeded)
)

func (cl *Client) newTicket(key string, token uint64, deadline time.Time, lease uint16) *Ticket {
	return &Ticket{Key: key, Token: token, Deadline: deadline, cl: cl, dl: deadline, lease: lease}
}

// CurrentDeadline is the ticket's deadline now: Deadline, until a confirmed extension
// replaces it with the extend's written_at + lease x (1 - rho). While an extend may have been
// applied and its answer is not known, it is the earlier of that and the extend's own (a
// shorter lease shortens the lock).
func (t *Ticket) CurrentDeadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadlineLocked()
}

func (t *Ticket) deadlineLocked() time.Time {
	if x := t.x; x != nil && !x.pend.IsZero() && x.pend.Before(t.dl) {
		return x.pend
	}
	return t.dl
}

// Remaining is the time left until CurrentDeadline on the client's clock, never negative;
// 0 once the ticket is lost.
func (t *Ticket) Remaining() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if errors.Is(t.ended, ErrTicketLost) {
		return 0
	}
	return max(0, t.deadlineLocked().Sub(t.cl.clock.Now()))
}

// Context returns a context that ends when the ticket does, whichever comes first:
//   - at the deadline: Err is context.DeadlineExceeded;
//   - when the ticket is released: context.Canceled;
//   - when it is lost (an extend answered N) or its keep-alive gives up: context.Canceled.
//
// context.Cause says which, wrapping ErrTicketEnded, ErrTicketLost or ErrTicketUnconfirmed
// (contexts derived from it say the same). Its Deadline method reports CurrentDeadline, so
// database drivers and other deadline-aware code stop in time. An extension moves it (later
// when confirmed, earlier while a shorter one is unknown), unlike a standard context's;
// code that read it before still stops no later than the lease, since the context ends
// when the ticket does. Derive the contexts of the work from it.
func (t *Ticket) Context() context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx == nil {
		t.ctx = newLeaseContext(t)
		if t.ended != nil {
			t.ctx.end(t.ended)
		} else {
			t.armLocked()
		}
	}
	return t.ctx
}

// armLocked sets the context's timer at the current deadline, replacing any earlier one. It
// does nothing before Context is called or once the ticket ended. t.mu is held.
func (t *Ticket) armLocked() {
	l := t.ctx
	if l == nil || t.ended != nil {
		return
	}
	if l.stop != nil {
		l.stop()
	}
	l.gen++
	gen := l.gen
	l.stop = t.cl.clock.AfterFunc(t.deadlineLocked().Sub(t.cl.clock.Now()), func() { t.timeUp(gen) })
}

// timeUp ends the ticket at its deadline, unless the timer is stale.
func (t *Ticket) timeUp(gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gen != t.ctx.gen || t.ended != nil {
		return
	}
	if t.cl.clock.Now().Before(t.deadlineLocked()) { // cannot happen: a moved deadline rearms
		t.armLocked()
		return
	}
	t.endLocked(errDeadlineCause)
}

// endLocked ends the ticket with cause, once: its context is canceled with it. t.mu is held.
func (t *Ticket) endLocked(cause error) {
	if t.ended != nil {
		return
	}
	t.ended = cause
	if l := t.ctx; l != nil {
		if l.stop != nil {
			l.stop()
		}
		l.end(cause)
	}
}

// Release releases this ticket's lock (Client.Release with its key and token) and ends the
// ticket, whatever the outcome: its context is canceled (cause ErrTicketEnded). A keep-alive
// is stopped first, so no extend follows the release. Once a call has released the lock or
// found it not held, later calls send nothing and return ErrAlreadyReleased; after any other
// error (unavailable, indeterminate) a later call tries again. ErrNotHeld after the ticket's
// deadline is ErrLeaseEnded too: the lease had run out before the release.
func (t *Ticket) Release(ctx context.Context) error {
	t.stopKeepAlive()
	t.mu.Lock()
	settled := t.settled
	t.mu.Unlock()
	if settled {
		return ErrAlreadyReleased
	}
	err := t.cl.Release(ctx, t.Key, t.Token)
	if errors.Is(err, ErrNotHeld) {
		if now, dl := t.cl.clock.Now(), t.CurrentDeadline(); !now.Before(dl) {
			err = &leaseEndedError{over: now.Sub(dl), err: err}
		}
	}
	t.mu.Lock()
	t.released = true
	t.settled = t.settled || err == nil || errors.Is(err, ErrNotHeld)
	t.endLocked(errReleasedCause)
	t.mu.Unlock()
	return err
}

// ErrLeaseEnded: a Ticket's release found the lock not held after the ticket's own
// deadline: the lease had ended, and the lock was free (or another's) before the release.
// It comes with ErrNotHeld.
var ErrLeaseEnded = errors.New("latch: the lease had ended before the release: the lock expired at the ticket's deadline")

type leaseEndedError struct {
	over time.Duration
	err  error
}

func (e *leaseEndedError) Error() string {
	return fmt.Sprintf("latch: not held: the lease had ended %v before the release (at the ticket's deadline): the lock expired, "+
		"and work done after the deadline was not protected by it; release before the deadline, or ask for a longer lease", e.over.Round(time.Millisecond))
}

func (e *leaseEndedError) Unwrap() []error { return []error{ErrLeaseEnded, e.err} }

// leaseContext is a ticket's context: it ends with the client's clock (which may be a test
// clock), reports the ticket's deadline, says DeadlineExceeded when the lease ran out, and
// gives the ticket's cause to context.Cause. Contexts derived from it are canceled through
// AfterFunc, without a goroutine each.
//
// Two contexts make it: cause is canceled first, with the cause, and done second. Done is
// done's channel. Value hands context.Cause the cause context, whose channel is not Done's,
// so the context package attaches children through AfterFunc (getting this context's Err,
// DeadlineExceeded included) and reads their cause from cause.
type leaseContext struct {
	t        *Ticket
	done     context.Context
	endDone  context.CancelFunc
	cause    context.Context
	endCause context.CancelCauseFunc

	// The timer at the ticket's deadline, guarded by Ticket.mu: stop stops it, gen is its
	// generation (a timer of an older one does nothing).
	stop func() bool
	gen  uint64
}

func newLeaseContext(t *Ticket) *leaseContext {
	l := &leaseContext{t: t}
	l.done, l.endDone = context.WithCancel(context.Background())
	l.cause, l.endCause = context.WithCancelCause(context.Background())
	return l
}

// end cancels the context with cause.
func (l *leaseContext) end(cause error) {
	l.endCause(cause)
	l.endDone()
}

func (l *leaseContext) Deadline() (time.Time, bool) { return l.t.CurrentDeadline(), true }
func (l *leaseContext) Done() <-chan struct{}       { return l.done.Done() }
func (l *leaseContext) Value(key any) any           { return l.cause.Value(key) }

func (l *leaseContext) Err() error {
	if l.done.Err() == nil {
		return nil
	}
	if errors.Is(context.Cause(l.cause), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return context.Canceled
}

// AfterFunc lets context.WithCancel and friends attach children without a goroutine.
func (l *leaseContext) AfterFunc(f func()) func() bool { return context.AfterFunc(l.done, f) }

func (l *leaseContext) String() string { return "latch.Ticket.Context" }
