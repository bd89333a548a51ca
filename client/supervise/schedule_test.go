package supervise

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// The stops sit grace and KillMargin before the lease's end, or before the hold cap when it
// comes first; the round of extension begins 2 x Period before the SIGTERM, that is Period
// after the lease began, and none is needed once the lease reaches the cap.
func TestScheduleStopsAndAttempts(t *testing.T) {
	s := Schedule{Lease: 30 * time.Second, Grace: 10 * time.Second}
	if p := s.Period(); p != 20*time.Second/3 {
		t.Fatalf("Period %v, want (30s - 10s) / 3", p)
	}
	for _, c := range []struct {
		name     string
		hold     time.Time
		deadline time.Time
		want     Stops
		next     time.Time
		extend   bool
	}{
		{"no cap", time.Time{}, at(30 * time.Second),
			Stops{End: at(30 * time.Second), TermAt: at(20 * time.Second), KillAt: at(30*time.Second - KillMargin)}, at(20*time.Second - 2*(20*time.Second/3)), true},
		{"cap after the lease", at(time.Minute), at(30 * time.Second),
			Stops{End: at(30 * time.Second), TermAt: at(20 * time.Second), KillAt: at(30*time.Second - KillMargin)}, at(20*time.Second - 2*(20*time.Second/3)), true},
		{"cap before the lease", at(25 * time.Second), at(30 * time.Second),
			Stops{End: at(25 * time.Second), TermAt: at(15 * time.Second), KillAt: at(25*time.Second - KillMargin), Held: true}, time.Time{}, false},
		{"cap at the lease", at(30 * time.Second), at(30 * time.Second),
			Stops{End: at(30 * time.Second), TermAt: at(20 * time.Second), KillAt: at(30*time.Second - KillMargin)}, time.Time{}, false},
		{"a first deadline short of a full lease", time.Time{}, at(12 * time.Second),
			Stops{End: at(12 * time.Second), TermAt: at(2 * time.Second), KillAt: at(12*time.Second - KillMargin)}, at(2*time.Second - 2*(20*time.Second/3)), true},
	} {
		s.HoldEnd = c.hold
		if got := s.Stops(c.deadline); got != c.want {
			t.Errorf("%s: Stops = %+v, want %+v", c.name, got, c.want)
		}
		next, ok := s.NextAttempt(c.deadline)
		if ok != c.extend || !next.Equal(c.next) {
			t.Errorf("%s: NextAttempt = %v %v, want %v %v", c.name, next, ok, c.next, c.extend)
		}
	}
	// In steady state an extension at x ends the lease at x + Lease: the next round begins
	// Period later.
	s.HoldEnd = time.Time{}
	x := at(7 * time.Second)
	if next, _ := s.NextAttempt(x.Add(s.Lease)); next.Sub(x) < s.Period() || next.Sub(x) > s.Period()+2 { // (Lease - Grace) % 3 ns
		t.Fatalf("after an extension at %v the next begins %v later, want %v", x, next.Sub(x), s.Period())
	}
	if got := s.AttemptEnd(at(0), at(time.Minute)); !got.Equal(at(s.Period())) {
		t.Fatalf("AttemptEnd far from the SIGTERM = %v, want Period later", got)
	}
	if got := s.AttemptEnd(at(0), at(time.Second)); !got.Equal(at(time.Second)) {
		t.Fatalf("AttemptEnd near the SIGTERM = %v, want the SIGTERM", got)
	}
}

// CheckSchedule refuses a grace that leaves no room before the SIGKILL, leases and graces
// where two attempts of MinAttempt do not fit before the SIGTERM, and hold caps within the
// grace.
func TestCheckSchedule(t *testing.T) {
	for _, c := range []struct {
		lease, grace, hold time.Duration
		ok                 bool
	}{
		{30 * time.Second, 10 * time.Second, 0, true},
		{3 * time.Second, time.Second, 0, true}, // Period 667 ms
		{time.Second, 0, 0, true},               // Period 333 ms
		{time.Second, 250 * time.Millisecond, 0, true},
		{time.Second, 251 * time.Millisecond, 0, false}, // Period just below 250 ms
		{2 * time.Second, 1500 * time.Millisecond, 0, false},
		{30 * time.Second, -time.Second, 0, false},
		{30 * time.Second, 30*time.Second - KillMargin, 0, false},
		{30 * time.Second, 10 * time.Second, time.Hour * 48, true},
		{30 * time.Second, 10 * time.Second, 10*time.Second + KillMargin, false},
		{30 * time.Second, 10 * time.Second, 10*time.Second + KillMargin + time.Millisecond, true},
		{30 * time.Second, 10 * time.Second, -time.Second, false},
	} {
		if err := CheckSchedule(c.lease, c.grace, c.hold); (err == nil) != c.ok {
			t.Errorf("CheckSchedule(%v, %v, %v) = %v, want ok %v", c.lease, c.grace, c.hold, err, c.ok)
		}
	}
}
