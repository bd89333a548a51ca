package client

import (
	"context"
	"errors"
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

	cl *Client

	// The context is made on the first Context call: most callers never ask for it, and it
	// costs a timer. mu guards the fields below.
	mu       sync.Mutex
	ctx      *leaseContext
	cancel   context.CancelCauseFunc
	stop     func() bool
	released bool
}

// errLeaseOver is the cancellation cause of a ticket's context at its deadline.
var errLeaseOver = errors.New("latch: lease deadline reached")

func (cl *Client) newTicket(key string, token uint64, deadline time.Time) *Ticket {
	return &Ticket{Key: key, Token: token, Deadline: deadline, cl: cl}
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
// its context, whatever the outcome.
func (t *Ticket) Release(ctx context.Context) error {
	err := t.cl.Release(ctx, t.Key, t.Token)
	t.mu.Lock()
	t.released = true
	if t.ctx != nil {
		if t.stop != nil {
			t.stop()
		}
		t.cancel(context.Canceled)
	}
	t.mu.Unlock()
	return err
}

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
