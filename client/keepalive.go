package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// KeepAlive extends the ticket in the background, every `every` (0 means a third of its
// lease), each time with its lease (the acquire's, or the last confirmed Extend's), until ctx
// ends, the ticket is released, or an extension fails. It needs protocol revision 2, like
// Extend.
//
// Each round begins `every` after the start of the current lease as the client counts it
// (CurrentDeadline - lease x (1 - rho)), moved earlier onto the keep-alive grid (see
// KeepAliveStart), and lasts until an extension is confirmed. An attempt
// is an Extend bounded by IOTimeout and by the round's end; E unavailable, a lost connection
// and unknown answers are asked again, within the attempt and then in new attempts after a
// backoff (50 ms doubling to 1 s, jittered). The round ends, unconfirmed, when only `every`
// of the lease is left (at CurrentDeadline - every): the ticket's context ends at that moment
// with ErrTicketUnconfirmed, so the work has `every` to stop before the lease can run out. A
// definite failure ends it at once: an N with ErrTicketLost; E unsupported, another E, or the
// client closing, with ErrTicketUnconfirmed wrapping the error. Watch Ticket.Context (and
// context.Cause) for it, as for etcd's Session.Done.
//
// every must be above 0 and at most a third of the lease, or ErrUnsupportedDuration. KeepAlive
// returns at once: nil once it runs; ErrUnsupported when no connection of the pool carries
// revision 2; ErrExtendInProgress when a keep-alive runs already or an Extend is in flight;
// the ticket's end cause when it has ended. While it runs, Extend returns ErrExtendInProgress.
// Release stops it before releasing, so no extend follows the release; canceling ctx stops it
// too, and the ticket keeps the deadline it has.
//
// The keep-alive does not make a paused holder safe: a process paused past its deadline (a GC
// pause, SIGSTOP, a suspended VM) pauses its keep-alive too. Its lease ends, another holder may
// be granted a newer token, and when the paused one wakes only the resources' fencing check
// refuses its writes: pass Token to every resource, as without a keep-alive.
func (t *Ticket) KeepAlive(ctx context.Context, every time.Duration) error {
	cl := t.cl
	unsupported := cl.unsupported()
	now := cl.clock.Now()
	t.mu.Lock()
	lease := t.lease
	err := t.extendableLocked(now, nil)
	t.mu.Unlock()
	full := time.Duration(lease) * time.Second
	if every == 0 {
		every = full / 3
	}
	switch {
	case every <= 0 || every > full/3:
		return fmt.Errorf("%w: keep-alive interval %v is outside (0, %v], a third of the lease %v", ErrUnsupportedDuration, every, full/3, full)
	case err != nil:
		return err
	case unsupported:
		return fmt.Errorf("%w: no connection of the pool carries protocol revision 2 (its servers do not offer it); no keep-alive started", ErrUnsupported)
	}
	kctx, cancel := context.WithCancel(ctx) // outside t.mu: ctx may be the ticket's own context
	ka := &keepAlive{ctx: kctx, cancel: cancel, done: make(chan struct{})}
	t.mu.Lock()
	if err := t.extendableLocked(now, nil); err != nil {
		t.mu.Unlock()
		cancel()
		return err
	}
	t.xLocked().ka = ka
	t.mu.Unlock()
	go t.keepAlive(kctx, ka, lease, every)
	return nil
}

// KeepAliveStart is when a keep-alive with interval every begins the round it is due to
// begin at t: t moved back onto the grid of every/n (n = every/250 ms rounded up, at least 8)
// on the client's clock, so at most every/8 early. The keep-alives of one client with the
// same interval then extend together: their frames share the client's writes, the server's
// reads and its replies' writes, and one leadership confirmation, where extends each at its
// own moment would cost a request each. A round that began on the grid is confirmed with
// the next lease starting just after that grid point, so every later round begins on the
// grid exactly every apart.
func KeepAliveStart(t time.Time, every time.Duration) time.Time {
	tick := every / time.Duration(max(8, (every+keepAliveTick-1)/keepAliveTick))
	if tick <= 0 {
		return t
	}
	off := t.UnixNano() % int64(tick)
	if off < 0 { // before 1970 (a test clock): % keeps the sign, and the move stays backwards
		off += int64(tick)
	}
	return t.Add(-time.Duration(off))
}

// keepAliveTick is the keep-alive grid's longest step: a client's keep-alives come together
// at most this far apart (four times a second).
const keepAliveTick = 250 * time.Millisecond

// keepAlive is a running Ticket.KeepAlive: cancel stops it (ctx ends), done is closed when it
// has.
type keepAlive struct {
	ctx    context.Context
	cancel func()
	done   chan struct{}
	last   error // the last attempt's error in the current round; guarded by Ticket.mu
}

// stopKeepAlive stops the ticket's keep-alive, if one runs, and waits until it has: no
// extend of it is in flight afterwards.
func (t *Ticket) stopKeepAlive() {
	var ka *keepAlive
	t.mu.Lock()
	if t.x != nil {
		ka = t.x.ka
	}
	t.mu.Unlock()
	if ka != nil {
		ka.cancel()
		<-ka.done
	}
}

// keepAlive runs the rounds of ka until one ends it.
func (t *Ticket) keepAlive(ctx context.Context, ka *keepAlive, lease uint16, every time.Duration) {
	cl := t.cl
	defer func() {
		ka.cancel()
		t.mu.Lock()
		if t.x.ka == ka {
			t.x.ka = nil
		}
		t.mu.Unlock()
		close(ka.done)
	}()
	span := leaseSpan(lease, cl.ppb)
	for {
		dl := t.CurrentDeadline()
		if !t.sleep(ctx, KeepAliveStart(dl.Add(every-span), every).Sub(cl.clock.Now()), true) {
			return
		}
		// The round's end ends the ticket at that very moment, whatever the attempt in flight
		// is doing (that attempt is bounded by it too).
		end := dl.Add(-every)
		stop := cl.clock.AfterFunc(end.Sub(cl.clock.Now()), func() { t.unconfirmed(ka, dl, every) })
		confirmed := t.round(ctx, ka, lease, end, dl, every)
		stop()
		if !confirmed {
			return
		}
	}
}

// round tries to have an extension confirmed before end; it reports whether it was. dl is the
// deadline when the round began.
func (t *Ticket) round(ctx context.Context, ka *keepAlive, lease uint16, end, dl time.Time, every time.Duration) bool {
	cl := t.cl
	var backoff time.Duration
	for {
		now := cl.clock.Now()
		if !now.Before(end) {
			t.unconfirmed(ka, dl, every)
			return false
		}
		err := t.extend(ctx, lease, end, ka)
		switch {
		case err == nil:
			t.mu.Lock()
			ka.last = nil
			t.mu.Unlock()
			return true
		case ctx.Err() != nil: // stopped: Release, or the caller's ctx
			return false
		case errors.Is(err, ErrTicketLost), errors.Is(err, ErrTicketEnded), errors.Is(err, ErrTicketUnconfirmed):
			return false // it has ended, with its cause
		case !retryable(err):
			t.end(fmt.Errorf("%w: the extension failed definitely: %w", ErrTicketUnconfirmed, err))
			return false
		}
		t.mu.Lock()
		ka.last = err
		t.mu.Unlock()
		backoff = min(max(2*backoff, retryMin), retryMax)
		pause := min(backoff/2+rand.N(backoff/2+1), end.Sub(cl.clock.Now()))
		if !t.sleep(ctx, pause, false) {
			return false
		}
	}
}

// retryable reports whether an extend that failed with err may succeed if asked again: it
// was not applied, or may have been (a resend is safe), and nothing says it never will.
func retryable(err error) bool {
	for _, e := range []error{ErrTimeout, ErrUnavailable, ErrIndeterminate, ErrQueueFull, ErrAuth, ErrExtendInProgress} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// unconfirmed ends the ticket when ka's round that began at deadline dl is over without a
// confirmed extension (the deadline has not moved past dl).
func (t *Ticket) unconfirmed(ka *keepAlive, dl time.Time, every time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.x.ka != ka || ka.ctx.Err() != nil || t.deadlineLocked().After(dl) {
		return // stopped, or confirmed
	}
	last := "no attempt was answered in time"
	if ka.last != nil {
		last = "the last attempt: " + ka.last.Error()
	}
	t.endLocked(fmt.Errorf("%w: none confirmed with %v of the lease left (%s)", ErrTicketUnconfirmed, every, last))
}

// sleep waits d, on the client's clock (clock true: the schedule) or in real time (a retry
// backoff, as for every call), and reports whether the keep-alive goes on: false when ctx
// ends, or when the client closes, which ends the ticket (no extension can be confirmed any
// more).
func (t *Ticket) sleep(ctx context.Context, d time.Duration, clock bool) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	fire := make(chan struct{})
	var stop func() bool
	if clock {
		stop = t.cl.clock.AfterFunc(d, func() { close(fire) })
	} else {
		stop = time.AfterFunc(d, func() { close(fire) }).Stop
	}
	defer stop()
	select {
	case <-fire:
		return true
	case <-ctx.Done():
		return false
	case <-t.cl.stop:
		t.end(fmt.Errorf("%w: %w", ErrTicketUnconfirmed, ErrClosed))
		return false
	}
}

// end ends the ticket with cause, once.
func (t *Ticket) end(cause error) {
	t.mu.Lock()
	t.endLocked(cause)
	t.mu.Unlock()
}
