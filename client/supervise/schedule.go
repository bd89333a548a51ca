package supervise

import (
	"fmt"
	"time"
)

// KillMargin is how long before a lease's deadline the group is killed, so that the command
// is gone before the lease is (the kill and the exit take a moment).
const KillMargin = 250 * time.Millisecond

// MinAttempt is the shortest extend attempt a schedule may plan: an extend is a round trip
// and a log commit, and an attempt shorter than this would mostly end unanswered.
// CheckSchedule refuses leases and graces whose Period is below it.
const MinAttempt = 250 * time.Millisecond

// Schedule is when Supervise stops the command around the lease and when it extends it. All
// of it is pure arithmetic on the lease's current deadline: no clock is read here.
//
// A lease that ends at deadline D stops the command at Stops(D): SIGTERM Grace before the
// end, SIGKILL KillMargin before it, where the end is D or HoldEnd, whichever is earlier.
// While the lease is extended, a round of attempts begins at NextAttempt(D) = TermAt - 2 x
// Period, that is Period after the lease began (Period = (Lease - Grace) / 3), and lasts
// until TermAt: the window holds two attempts of Period each, so one attempt that goes
// unanswered is followed by another before the command is stopped. A confirmed extension
// moves D, and with it every time above.
type Schedule struct {
	// Lease is the lease asked for by the acquire and by every extension (--lease).
	Lease time.Duration
	// Grace is how long before the end the command gets SIGTERM (--kill-grace).
	Grace time.Duration
	// HoldEnd caps the whole hold (--max-hold from the grant): from then on the command is
	// stopped as at a lease end, and no extension is needed. Zero: no cap.
	HoldEnd time.Time
}

// Period is the extension interval, (Lease - Grace) / 3, and the longest one attempt may take.
func (s Schedule) Period() time.Duration { return (s.Lease - s.Grace) / 3 }

// Stops are the times at which the command is stopped.
type Stops struct {
	End    time.Time // the lease's deadline, or HoldEnd when earlier
	TermAt time.Time // SIGTERM: End - Grace
	KillAt time.Time // SIGKILL: End - KillMargin
	Held   bool      // End is HoldEnd: the command is stopped because --max-hold is reached
}

// Stops are the stop times for a lease that ends at deadline.
func (s Schedule) Stops(deadline time.Time) Stops {
	st := Stops{End: deadline}
	if !s.HoldEnd.IsZero() && s.HoldEnd.Before(deadline) {
		st.End, st.Held = s.HoldEnd, true
	}
	st.TermAt, st.KillAt = st.End.Add(-s.Grace), st.End.Add(-KillMargin)
	return st
}

// NextAttempt is when the round that extends a lease ending at deadline begins, and whether
// one is needed at all: none once the lease reaches HoldEnd.
func (s Schedule) NextAttempt(deadline time.Time) (time.Time, bool) {
	if !s.HoldEnd.IsZero() && !deadline.Before(s.HoldEnd) {
		return time.Time{}, false
	}
	return deadline.Add(-s.Grace - 2*s.Period()), true
}

// AttemptEnd bounds an attempt that starts at now in the round that ends at termAt: at most
// Period, never past the SIGTERM.
func (s Schedule) AttemptEnd(now, termAt time.Time) time.Time {
	if end := now.Add(s.Period()); end.Before(termAt) {
		return end
	}
	return termAt
}

// CheckSchedule reports why lease, grace and maxHold (0: none) cannot make a schedule: the
// SIGTERM must come before the SIGKILL, two attempts of at least MinAttempt must fit between
// the start of a round and the SIGTERM, and a hold cap must leave room for the grace.
func CheckSchedule(lease, grace, maxHold time.Duration) error {
	s := Schedule{Lease: lease, Grace: grace}
	switch {
	case grace < 0 || grace+KillMargin >= lease:
		return fmt.Errorf("--kill-grace %s must be shorter than --lease %s minus %s", grace, lease, KillMargin)
	case s.Period() < MinAttempt:
		return fmt.Errorf("--lease %s minus --kill-grace %s leaves %s between extensions, less than %s: two extend attempts of at least %s must fit before the SIGTERM; "+
			"use a longer --lease or a shorter --kill-grace (at least 3 x %s apart)", lease, grace, s.Period(), MinAttempt, MinAttempt, MinAttempt)
	case maxHold < 0:
		return fmt.Errorf("--max-hold %s is negative (0: no cap)", maxHold)
	case maxHold > 0 && maxHold <= grace+KillMargin:
		return fmt.Errorf("--max-hold %s must be longer than --kill-grace %s plus %s", maxHold, grace, KillMargin)
	}
	return nil
}
