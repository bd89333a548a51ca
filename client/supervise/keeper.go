package supervise

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/latchd/latch/client"
)

// Extender is the lease a Keeper keeps: *client.Ticket.
type Extender interface {
	// Extend renews the lease for lease from the moment the extend is written; see
	// client.Ticket.Extend for its results.
	Extend(ctx context.Context, lease time.Duration) error
	// CurrentDeadline is the lease's end as the client counts it: moved later only by a
	// confirmed extension, earlier while one's answer is unknown.
	CurrentDeadline() time.Time
}

// ChangeKind says what a Keeper learnt.
type ChangeKind int

const (
	// Extended: an extension was confirmed; Deadline is the lease's new end.
	Extended ChangeKind = iota
	// Earlier: an attempt's outcome is unknown and the client counts an earlier end
	// (Deadline) for the lease; the stops must move earlier, never later.
	Earlier
	// Lost: the server answered that the token does not hold the lock: stop the command now.
	Lost
	// Unsupported: the server cannot extend (it does not offer protocol revision 2): the
	// command is stopped at the end of the lease it has. The Keeper has stopped.
	Unsupported
	// Failed: an extension failed definitely for another reason (Err); the Keeper has
	// stopped and the lease ends at Deadline.
	Failed
	// Paused: the command is stopped (SIGTSTP, SIGSTOP): no extension is sent until it
	// continues. Sent once each time the Keeper finds it stopped when it would extend.
	Paused
)

// Change is something a Keeper learnt about the lease.
type Change struct {
	Kind     ChangeKind
	Deadline time.Time
	Err      error
}

// stopPoll is how often a Keeper looks again at a command it found stopped.
const stopPoll = 100 * time.Millisecond

// Backoff between attempts of a round that failed without an answer saying so definitely
// (unavailable, timeout, unknown): from backoffMin doubling up to backoffMax, jittered, never
// past the round's end.
const (
	backoffMin = 50 * time.Millisecond
	backoffMax = time.Second
)

// Keeper extends a lease on its Schedule while the command runs. It decides nothing about the
// command: it reports what it learnt, and Supervise moves the stops.
type Keeper struct {
	Lease    Extender
	Schedule Schedule
	// Stopped reports whether the command is stopped; nil: never.
	Stopped func() bool
	// Clock is the clock of the schedule and the backoff; nil: the process clock.
	Clock client.Clock

	// advance, if set, replaces every wait of Run: it moves a test clock on by d, firing its
	// timers, so that a test runs Run in its own goroutine, step by step.
	advance func(d time.Duration)
}

// Run keeps the lease until ctx ends or an extension can no longer help (the round's end
// passed, the lock is lost, the server cannot extend, a definite failure, the hold cap
// reached). It sends what it learns to out, in order; a send gives up when ctx ends. It is
// called once, from its own goroutine; it has returned when no extend of it is in flight.
func (k *Keeper) Run(ctx context.Context, out chan<- Change) {
	clock := k.Clock
	if clock == nil {
		clock = realClock{}
	}
	send := func(c Change) bool {
		select {
		case out <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	s := k.Schedule
	deadline := k.Lease.CurrentDeadline()
	for {
		at, ok := s.NextAttempt(deadline)
		if !ok || !k.sleep(ctx, clock, at.Sub(clock.Now())) {
			return
		}
		termAt := s.Stops(deadline).TermAt
		var backoff time.Duration
		paused := false
		for confirmed := false; !confirmed; {
			now := clock.Now()
			if !now.Before(termAt) {
				return // the round is over unconfirmed: the command is stopped at its lease end
			}
			if k.Stopped != nil && k.Stopped() {
				if !paused && !send(Change{Kind: Paused, Deadline: deadline}) {
					return
				}
				paused = true
				if !k.sleep(ctx, clock, min(stopPoll, termAt.Sub(now))) {
					return
				}
				continue
			}
			paused = false
			actx, cancel := withDeadline(ctx, clock, s.AttemptEnd(now, termAt))
			err := k.Lease.Extend(actx, s.Lease)
			cancel()
			dl := k.Lease.CurrentDeadline()
			switch {
			case err == nil:
				deadline, confirmed = dl, true
				if !send(Change{Kind: Extended, Deadline: dl}) {
					return
				}
				continue
			case errors.Is(err, client.ErrTicketLost), errors.Is(err, client.ErrNotHeld):
				send(Change{Kind: Lost, Deadline: dl, Err: err})
				return
			case errors.Is(err, client.ErrUnsupported):
				send(Change{Kind: Unsupported, Deadline: dl, Err: err})
				return
			case ctx.Err() != nil, errors.Is(err, client.ErrTicketEnded), errors.Is(err, client.ErrTicketUnconfirmed):
				return // stopped, or the lease has ended: the stops already say so
			case !retryable(err):
				send(Change{Kind: Failed, Deadline: dl, Err: err})
				return
			}
			if dl.Before(deadline) { // an unknown outcome: a shorter lease may have been applied
				deadline = dl
				termAt = s.Stops(deadline).TermAt
				if !send(Change{Kind: Earlier, Deadline: dl}) {
					return
				}
			}
			backoff = min(max(2*backoff, backoffMin), backoffMax)
			pause := backoff/2 + rand.N(backoff/2+1)
			if !k.sleep(ctx, clock, min(pause, termAt.Sub(clock.Now()))) {
				return
			}
		}
	}
}

// retryable reports whether an extend that failed with err may succeed in a new attempt: it
// was not applied, or may have been (a resend is safe), and nothing says it never will.
func retryable(err error) bool {
	for _, e := range []error{client.ErrTimeout, client.ErrUnavailable, client.ErrIndeterminate, client.ErrQueueFull, client.ErrAuth, client.ErrExtendInProgress} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sleep waits d on clock and reports whether ctx is still live.
func (k *Keeper) sleep(ctx context.Context, clock client.Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	if k.advance != nil {
		k.advance(d)
		return ctx.Err() == nil
	}
	fire := make(chan struct{})
	stop := clock.AfterFunc(d, func() { close(fire) })
	defer stop()
	select {
	case <-fire:
		return true
	case <-ctx.Done():
		return false
	}
}

// withDeadline is ctx ended at end on clock (the client reads the context's deadline in real
// time; the timer makes a test clock end it too).
func withDeadline(ctx context.Context, clock client.Clock, end time.Time) (context.Context, context.CancelFunc) {
	d := end.Sub(clock.Now())
	actx, cancel := context.WithTimeout(ctx, max(d, 0))
	stop := clock.AfterFunc(d, cancel)
	return actx, func() {
		stop()
		cancel()
	}
}

// realClock is the process clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
