package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchd/latch/wire"
)

// Extend gives the ticket's lock a new lease, counted from when the extend is written: lease
// is rounded up to whole seconds and must then be 1..3600 s (0 means DefaultLease), as for
// Acquire. It needs protocol revision 2 (docs/protocol.md section 7) and goes out
// on any connection of the pool that carries it; the token stays the same. It has IOTimeout
// from the call, resends included, and never goes past the ticket's deadline: nothing is sent
// at or after it. ctx may shorten that. One extend of a ticket is in flight at a time.
//
// Results:
//   - nil: extended (L). CurrentDeadline becomes the extend's written_at + lease x (1 - rho),
//     replacing the old one even when it is earlier: a shorter lease shortens the lock.
//   - ErrTicketLost (with ErrNotHeld): answered N: this token does not hold the lock any
//     more. The ticket's context ends with ErrTicketLost. Stop the work.
//   - ErrUnsupported: definitely not extended: no connection of the pool carries revision 2
//     (nothing was sent), or the server answered E unsupported. Asking again does not help;
//     the deadline stands.
//   - ErrIndeterminate: it may or may not have been extended (no answer in time, the
//     connection was lost and no time was left to send it again). Since a shorter lease may
//     have been applied, CurrentDeadline is the earlier of the old deadline and the first
//     such attempt's written_at + lease x (1 - rho). Extending again is safe: each attempt
//     is applied again, for the same token.
//   - ErrTimeout or ErrUnavailable: definitely not extended (never sent, or refused by every
//     server until the call's end); the deadline stands.
//   - ErrTicketEnded (or the ticket's other end cause): the ticket had ended (released, its
//     deadline passed, lost, or its keep-alive gave up) and nothing was sent; or the extension
//     was confirmed only after the deadline, which does not revive the ticket: its token is
//     then released in the background, since the server may now hold it longer.
//   - ErrExtendInProgress: another extend of this ticket is in flight, or a keep-alive runs.
//   - ErrUnsupportedDuration, ErrCanceled, ErrClosed, ErrOwnerExhausted: nothing was sent;
//     *ServerError: another E answer (bad_key, internal), not extended.
//
// While the extend is in flight, CurrentDeadline (and the context's timer) already counts
// with the new lease when it is shorter.
func (t *Ticket) Extend(ctx context.Context, lease time.Duration) error {
	l, err := leaseSeconds(lease)
	if err != nil {
		return err
	}
	return t.extend(ctx, l, time.Time{}, nil)
}

// extend sends one extend of lease seconds and settles the ticket with its outcome. until, if
// set, bounds it further (a keep-alive's give-up point); ka is the keep-alive that asks.
func (t *Ticket) extend(ctx context.Context, lease uint16, until time.Time, ka *keepAlive) error {
	cl := t.cl
	unsupported := cl.unsupported()
	start := cl.clock.Now()
	t.mu.Lock()
	err := t.extendableLocked(start, ka)
	end := t.deadlineLocked()
	t.mu.Unlock()
	switch {
	case err != nil:
		return err
	case unsupported:
		return fmt.Errorf("%w: no connection of the pool carries protocol revision 2 (its servers do not offer it); nothing was sent", ErrUnsupported)
	}
	if !until.IsZero() && until.Before(end) {
		end = until
	}
	// Outside t.mu: ctx may be the ticket's own context, whose Deadline takes it.
	c, err := cl.prepare(ctx, kindExtend, start, min(ioTimeout, end.Sub(start)), false)
	if err != nil {
		return err
	}
	c.key, c.token, c.lease = t.Key, t.Token, lease
	c.ext = &extendCall{tk: t, span: leaseSpan(lease, cl.ppb)}
	t.mu.Lock()
	if err := t.extendableLocked(start, ka); err != nil { // another extend began meanwhile
		t.mu.Unlock()
		return err
	}
	t.xLocked().ext = c
	t.mu.Unlock()
	res, err := cl.exchange(ctx, c, false)
	return t.extended(c, res, err)
}

// extendableLocked says why the ticket may not be extended at now by ka (nil: a caller's
// Extend), or nil. t.mu is held.
func (t *Ticket) extendableLocked(now time.Time, ka *keepAlive) error {
	switch {
	case t.ended != nil:
		return fmt.Errorf("%w; nothing sent", t.ended)
	case !now.Before(t.deadlineLocked()):
		return fmt.Errorf("%w (%v ago); nothing sent: an extend never goes out after the deadline", errDeadlineCause, now.Sub(t.deadlineLocked()))
	case t.x != nil && (t.x.ext != nil || t.x.ka != nil && t.x.ka != ka):
		return ErrExtendInProgress
	}
	return nil
}

// writing is called by the writer of the extend c just before an attempt at it goes out:
// from then on it may be applied, so the deadline is at most end (its written_at + span).
func (t *Ticket) writing(c *call, end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.x
	if x == nil || x.ext != c { // settled already (canceled while being written): extended counted it
		return
	}
	if x.pend.IsZero() || end.Before(x.pend) {
		x.pend = end
		t.armLocked()
	}
}

// extended settles the ticket with the outcome of its extend c.
func (t *Ticket) extended(c *call, res wire.Response, err error) error {
	cl := t.cl
	c.mu.Lock()
	writtenAt, maybeAt, readAt, span := c.writtenAt, c.ext.maybeAt, c.writtenAt.Add(c.seen), c.ext.span
	c.mu.Unlock()
	// unknown is the write of the first attempt that may have been applied, if any: an
	// earlier one lost with its connection, or the last one when its outcome is unknown.
	unknown := maybeAt
	if errors.Is(err, ErrIndeterminate) && !writtenAt.IsZero() && (unknown.IsZero() || writtenAt.Before(unknown)) {
		unknown = writtenAt
	}
	t.mu.Lock()
	was := t.deadlineLocked()
	t.x.ext, t.x.pend = nil, time.Time{}
	switch {
	case err == nil && res.Op == wire.OpExtend:
		if t.ended == nil && readAt.Before(was) {
			// Applied after this attempt was written, so the lock ends no earlier than that plus
			// the lease (an earlier attempt applied later only ends it later).
			t.dl, t.lease = writtenAt.Add(span), c.lease
			t.armLocked()
			t.mu.Unlock()
			cl.st.extended.Add(1)
			return nil
		}
		t.endLocked(errDeadlineCause)
		why := t.ended
		t.mu.Unlock()
		comp := cl.compensate(t.Key, t.Token, "the extension was confirmed only after the ticket had ended")
		return withCompensation(comp, "%w; the extension was confirmed only after that and does not revive the ticket: its token is being released in the background", why)
	case err == nil && res.Op == wire.OpNotHeld:
		t.endLocked(errLostCause)
		t.mu.Unlock()
		cl.st.extendNotHeld.Add(1)
		return lostError{}
	}
	if !unknown.IsZero() {
		if end := unknown.Add(span); end.Before(t.dl) {
			t.dl = end
		}
	}
	t.armLocked()
	t.mu.Unlock()
	if err != nil {
		return err
	}
	return &ServerError{Reason: res.Reason}
}

// errLostCause is the cause of a lost ticket's context.
var errLostCause = fmt.Errorf("%w (an extend was answered N: not held)", ErrTicketLost)

// lostError is Extend's result for N: the ticket is lost, and the token not held.
type lostError struct{}

func (lostError) Error() string   { return errLostCause.Error() }
func (lostError) Unwrap() []error { return []error{ErrTicketLost, ErrNotHeld} }

// Extend gives the lock key, held by token, a new lease without a Ticket: for a caller that
// has only the key and the token (`latch extend KEY TOKEN` in a script, a process that took
// over a lock from another). It is Ticket.Extend on a ticket made for this call, whose
// deadline the client does not know: the server alone decides whether token still holds key,
// and it never revives a lease that has ended. lease is as for Ticket.Extend; the call has
// IOTimeout, which ctx may shorten. On nil it returns the new deadline, the extend's
// written_at + lease x (1 - rho); its other results are Ticket.Extend's (N is ErrTicketLost
// with ErrNotHeld), the confirmation that comes only after the new lease would have ended
// included: ErrTicketEnded, and the token is released in the background. ErrBadKey and, for a
// token that is never granted, ErrNotHeld come without sending anything.
func (cl *Client) Extend(ctx context.Context, key string, token uint64, lease time.Duration) (time.Time, error) {
	if err := CheckKey(key); err != nil {
		return time.Time{}, err
	}
	if err := CheckToken(token); err != nil {
		return time.Time{}, err
	}
	l, err := leaseSeconds(lease)
	if err != nil {
		return time.Time{}, err
	}
	// The ticket's own deadline only bounds the call: past IOTimeout, so that the call's own
	// bound (IOTimeout) is the one that counts.
	t := cl.newTicket(key, token, cl.clock.Now().Add(2*ioTimeout), l)
	if err := t.extend(ctx, l, time.Time{}, nil); err != nil {
		return time.Time{}, err
	}
	return t.CurrentDeadline(), nil
}
