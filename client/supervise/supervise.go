package supervise

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// Event is something Supervise did that the user should hear about.
type Event int

const (
	// EventTerm: the lease is ending (TermAt): the group was sent SIGTERM.
	EventTerm Event = iota
	// EventKill: the lease is about to end (KillAt): the group was sent SIGKILL.
	EventKill
	// EventEscalate: a second signal arrived: the group was sent SIGKILL.
	EventEscalate
)

// Plan is how Supervise stops the command.
type Plan struct {
	TermAt, KillAt time.Time        // SIGTERM, then SIGKILL, to the group (zero: never)
	Signals        <-chan os.Signal // signals latch itself received
	Notice         func(Event)      // optional
}

// KillMargin is how long before a lease's deadline LeasePlan kills the group, so that the
// command is gone before the lease is (the kill and the exit take a moment).
const KillMargin = 250 * time.Millisecond

// LeasePlan stops the group around a lease that ends at deadline: SIGTERM grace before it,
// SIGKILL KillMargin before it. Signals and Notice are left for the caller.
func LeasePlan(deadline time.Time, grace time.Duration) Plan {
	return Plan{TermAt: deadline.Add(-grace), KillAt: deadline.Add(-KillMargin)}
}

// CheckGrace reports why grace cannot stop a command within a lease of lease: the SIGTERM
// must come before the SIGKILL at KillMargin before the lease's end.
func CheckGrace(grace, lease time.Duration) error {
	if grace < 0 || grace+KillMargin >= lease {
		return fmt.Errorf("the grace %s must be shorter than the lease %s minus %s", grace, lease, KillMargin)
	}
	return nil
}

// Outcome is how the command ended.
type Outcome struct {
	State      *os.ProcessState
	LeaseEnded bool // it was signalled because the lease was ending
	Escalated  bool // a second signal killed its group
}

// Supervise waits for the command to exit, passing on latch's signals, stopping the group at
// the plan's times and killing it on a second signal; then it closes the group (see Close).
func (g *Group) Supervise(p Plan) Outcome {
	notice := p.Notice
	if notice == nil {
		notice = func(Event) {}
	}
	term, kill := timerAt(p.TermAt), timerAt(p.KillAt)
	defer term.Stop()
	defer kill.Stop()
	var out Outcome
	signals := 0
	echoes := map[syscall.Signal]int{} // signals latch passed on, the guard will report back
	second := func() bool {
		signals++
		if signals < 2 || out.Escalated {
			return signals >= 2
		}
		out.Escalated = true
		notice(EventEscalate)
		g.Signal(syscall.SIGKILL)
		return true
	}
	for done := false; !done; {
		select {
		case <-g.done:
			done = true
		case s := <-p.Signals:
			sig, ok := s.(syscall.Signal)
			if !ok || second() {
				continue
			}
			g.Signal(sig)
			if _, back := reported[sig]; back {
				echoes[sig]++
			}
		case sig := <-g.reports:
			if echoes[sig] > 0 {
				echoes[sig]--
				g.echoed.Add(1)
				continue
			}
			second()
		case <-term.C:
			out.LeaseEnded = true
			notice(EventTerm)
			g.Signal(syscall.SIGTERM)
		case <-kill.C:
			out.LeaseEnded = true
			notice(EventKill)
			g.Signal(syscall.SIGKILL)
		}
	}
	g.Close()
	out.State = g.State()
	return out
}

// timerAt is a timer firing at t, or never for the zero time.
func timerAt(t time.Time) *time.Timer {
	if t.IsZero() {
		tm := time.NewTimer(time.Hour)
		tm.Stop()
		return tm
	}
	return time.NewTimer(time.Until(t))
}
