package supervise

import (
	"testing"
	"time"
)

// A lease plan sends SIGTERM grace before the deadline and SIGKILL KillMargin before it; a
// grace that leaves no room before the SIGKILL is refused.
func TestLeasePlanAndCheckGrace(t *testing.T) {
	deadline := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := LeasePlan(deadline, 10*time.Second)
	if !p.TermAt.Equal(deadline.Add(-10*time.Second)) || !p.KillAt.Equal(deadline.Add(-KillMargin)) {
		t.Fatalf("plan %v / %v, want SIGTERM 10s and SIGKILL %v before %v", p.TermAt, p.KillAt, KillMargin, deadline)
	}
	for _, c := range []struct {
		grace, lease time.Duration
		ok           bool
	}{
		{10 * time.Second, 30 * time.Second, true},
		{0, time.Second, true},
		{-time.Second, 30 * time.Second, false},
		{30*time.Second - KillMargin, 30 * time.Second, false},
		{30*time.Second - KillMargin - time.Millisecond, 30 * time.Second, true},
	} {
		if err := CheckGrace(c.grace, c.lease); (err == nil) != c.ok {
			t.Errorf("CheckGrace(%v, %v) = %v, want ok %v", c.grace, c.lease, err, c.ok)
		}
	}
}
