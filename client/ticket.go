package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Ticket is a granted lock: its key, its fencing token and a conservative end of its lease.
// Pass Token to every resource written under the lock; stop working by Deadline.
type Ticket struct {
	Key   string
	Token uint64
	// Deadline is when the lease ends at the latest as the client can know it: the moment
	// the acquire frame was written (before the server could grant it) plus the lease. It
	// carries the monotonic clock reading of the client's clock.
	Deadline time.Time

	cl    *Client
	lease uint16 // seconds, as granted

	// The context is made on the first Context call: most callers never ask for it, and it
	// costs a timer. mu guards the fields below.
	mu       sync.Mutex
	ctx      *leaseContext
	cancel   context.CancelCauseFunc
	stop     func() bool
	released bool
	settled  bool // a Release released the lock or found it not held: later ones send nothing
}

// errLeaseOver is the cancellation cause of a ticket's context at its deadline.
var errLeaseOver = errors.New("latch: lease deadline reached")

func (cl *Client) newTicket(key string, token uint64, deadline time.Time, lease uint16) *Ticket {
	return &Ticket{Key: key, Token: token, Deadline: deadline, cl: cl, lease: lease}
}

// Context returns a context that is done at Deadline (Err is then
// context.DeadlineExceeded) or when the ticket is released (context.Canceled), whichever
// comes first. Its Deadline method reports the ticket's Deadline, so database drivers and
// other deadline-aware code stop in time. Derive the contexts of the work from it.
func (t *Ticket) Context() context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx == nil {
		inner, cancel := context.WithCancelCause(context.Background())
		t.ctx, t.cancel = &leaseContext{inner: inner, deadline: t.Deadline}, cancel
		if t.released {
			cancel(context.Canceled)
		} else {
			t.stop = t.cl.clock.AfterFunc(t.Deadline.Sub(t.cl.clock.Now()), func() { cancel(errLeaseOver) })
		}
	}
	return t.ctx
}

// Release releases this ticket's lock (Client.Release with its key and token) and cancels
// its context, whatever the outcome. Once a call has released the lock or found it not
// held, later calls send nothing and return ErrAlreadyReleased; after any other error
// (unavailable, indeterminate) a later call tries again. ErrNotHeld after the ticket's
// Deadline is ErrLeaseEnded too: the lease had run out before the release.
func (t *Ticket) Release(ctx context.Context) error {
	t.mu.Lock()
	settled := t.settled
	t.mu.Unlock()
	if settled {
		return ErrAlreadyReleased
	}
	err := t.cl.Release(ctx, t.Key, t.Token)
	if errors.Is(err, ErrNotHeld) {
		if now := t.cl.clock.Now(); !now.Before(t.Deadline) {
			err = &leaseEndedError{over: now.Sub(t.Deadline), err: err}
		}
	}
	t.mu.Lock()
	t.released = true
	t.settled = t.settled || err == nil || errors.Is(err, ErrNotHeld)
	if t.ctx != nil {
		if t.stop != nil {
			t.stop()
		}
		t.cancel(context.Canceled)
	}
	t.mu.Unlock()
	return err
}

// ErrLeaseEnded: a Ticket's release found the lock not held after the ticket's own
// Deadline: the lease had ended, and the lock was free (or another's) before the release.
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

// Remaining is the time left until Deadline on the client's clock, never negative.
func (t *Ticket) Remaining() time.Duration {
	return max(0, t.Deadline.Sub(t.cl.clock.Now()))
}

// leaseContext is a ticket's context: it ends with the client's clock (which may be a test
// clock), reports the ticket's deadline, and says DeadlineExceeded when the lease ran out.
// Contexts derived from it are canceled through AfterFunc, without a goroutine each.
type leaseContext struct {
	inner    context.Context
	deadline time.Time
}

func (l *leaseContext) Deadline() (time.Time, bool) { return l.deadline, true }
func (l *leaseContext) Done() <-chan struct{}       { return l.inner.Done() }
func (l *leaseContext) Value(any) any               { return nil }

func (l *leaseContext) Err() error {
	if l.inner.Err() == nil {
		return nil
	}
	if context.Cause(l.inner) == errLeaseOver {
		return context.DeadlineExceeded
	}
	return context.Canceled
}

// AfterFunc lets context.WithCancel and friends attach children without a goroutine.
func (l *leaseContext) AfterFunc(f func()) func() bool { return context.AfterFunc(l.inner, f) }

func (l *leaseContext) String() string { return "latch.Ticket.Context" }
