package client

import (
	"context"
	"errors"
	"fmt"
)

// ErrCompensationDropped is the result of a Compensation that was never started: the
// client's CompensationQueue was full, or the client was closing. The token is left to end
// with its lease.
var ErrCompensationDropped = errors.New("latch: compensating release not started (compensation queue full, or the client closing): the lock may be held until its lease ends")

// Compensation is the background release of a granted token that the client did not hand
// out: an Acquire whose grant failed the delivery gate (ErrIndeterminate), or an extend
// confirmed only after the ticket had ended. Get it from the call's error with
// CompensationOf. It ends within IOTimeout of its start (Client.Close waits for it too).
type Compensation struct {
	Key   string
	Token uint64
	// Reason says why the client did not hand the token out, e.g. "granted token 7 has 1.2s
	// of lease left, less than the min work budget 5s".
	Reason string
	done   chan struct{} // closed when err is set
	err    error
}

// Wait blocks until the release has ended, or ctx ends first. It returns nil when the release
// was confirmed (answered R or N: the token holds nothing any more), ErrCompensationDropped
// when it never started, the release's error when it ended without such an answer (the lock
// may be held until its lease ends), or ctx's error (with context.Cause) if ctx ends first.
func (c *Compensation) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// settle records the release's outcome and wakes every Wait. Called once.
func (c *Compensation) settle(err error) {
	c.err = err
	close(c.done)
}

// CompensationOf returns the compensating release that the call which returned err started,
// or nil when it started none (only ErrIndeterminate results of Acquire and extends that
// were confirmed too late start one).
func CompensationOf(err error) *Compensation {
	var ce compensatedError
	if errors.As(err, &ce) {
		return ce.comp
	}
	return nil
}

// compensatedError is a call's error that started comp; it reads and matches as err.
type compensatedError struct {
	err  error
	comp *Compensation
}

func (e compensatedError) Error() string { return e.err.Error() }
func (e compensatedError) Unwrap() error { return e.err }

// withCompensation is the error of a call that started comp: format and args as fmt.Errorf.
func withCompensation(comp *Compensation, format string, args ...any) error {
	return compensatedError{err: fmt.Errorf(format, args...), comp: comp}
}
