package supervise

import (
	"context"
	"os"
	"syscall"
	"time"
)

// EventKind is something Supervise did or learnt that the user should hear about.
type EventKind int

const (
	// EventTerm: the lease (or the hold cap, Held) is ending at At: the group was sent SIGTERM
	// (and SIGCONT, so that a stopped command can handle it).
	EventTerm EventKind = iota
	// EventKill: the lease (or the hold cap) is about to end: the group was sent SIGKILL.
	EventKill
	// EventEscalate: a second signal arrived: the group was sent SIGKILL.
	EventEscalate
	// EventLost: an extend was answered "not held" (Err): the group was sent SIGTERM at once;
	// SIGKILL follows after the grace, or at the last confirmed deadline if that is sooner.
	EventLost
	// EventUnsupported: the server cannot extend the lease (Err): it ends at At, and the
	// command is stopped before it as without extension.
	EventUnsupported
	// EventExtendFailed: an extend failed definitely (Err); the lease ends at At.
	EventExtendFailed
	// EventPaused: the command is stopped (Ctrl-Z, SIGSTOP): its lease is not extended while
	// it is, and it gets SIGTERM at At unless it continues in time.
	EventPaused
	// EventExtended: an extension was confirmed: the lease now ends at At.
	EventExtended
	// EventOutlived: processes of the command's cgroup (Pids) outlived it and were killed;
	// Err says which were still there after cgroupDrain (the lock is then not released).
	EventOutlived
	// EventEscaped: the command had no cgroup (Err says why), and processes it started
	// (Pids) left its group and still run; they are not killed.
	EventEscaped
)

// Event is one notice of Supervise.
type Event struct {
	Kind EventKind
	At   time.Time
	Held bool  // EventTerm, EventKill: the end is the hold cap, not the lease's
	Err  error // EventLost, EventUnsupported, EventExtendFailed, EventOutlived, EventEscaped
	Pids []int // EventOutlived, EventEscaped
}

// Plan is how Supervise stops the command, and keeps its lease.
type Plan struct {
	// Deadline is when the lease ends, as the client counts it. Zero: no lease, the command
	// is never stopped for one.
	Deadline time.Time
	// Schedule says when the command is stopped around Deadline and when it is extended.
	Schedule Schedule
	// Lease, if set, is extended on Schedule while the command runs (see Keeper), and every
	// confirmed extension moves the stops, the guard's included. Nil: never extended.
	Lease   Extender
	Signals <-chan os.Signal // signals latch itself received
	Notice  func(Event)      // optional; called from Supervise's goroutine
}

// GuardKillAt is the kill deadline to give Start for a lease that ends at deadline.
func (p Plan) GuardKillAt() time.Time {
	if p.Deadline.IsZero() {
		return time.Time{}
	}
	return p.Schedule.Stops(p.Deadline).KillAt
}

// Outcome is how the command ended.
type Outcome struct {
	State      *os.ProcessState
	LeaseEnded bool // it was signalled because the lease was ending, or was lost (Lost)
	Lost       bool // the server said the token no longer holds the lock
	HoldEnded  bool // it was signalled because the hold cap (Schedule.HoldEnd) was reached
	Escalated  bool // a second signal killed its group
	// Outlived are the processes the command left in its cgroup, killed after it; Undrained
	// says which were still there after SIGKILL and cgroupDrain (nil: none).
	Outlived  []int
	Undrained error
	// Escaped are, without a cgroup, the processes the command started that left its group
	// and still run after it; NoCgroup is why it had none.
	Escaped  []int
	NoCgroup error
	// Release is, for a Job, the release of its lock after the command: nil when confirmed.
	Release error
}

// Supervise waits for the command to exit, passing on latch's signals, extending its lease,
// stopping the group at the plan's times (moved by each confirmed extension, and earlier when
// an outcome is unknown) and killing it on a second signal; then it closes the group (see
// Close) and reports what the command left (EventOutlived, EventEscaped). No extend is in
// flight once it returns, and nothing of the command's cgroup runs.
func (g *Group) Supervise(p Plan) Outcome {
	sv := &supervision{g: g, p: p, notice: p.Notice}
	if sv.notice == nil {
		sv.notice = func(Event) {}
	}
	if !p.Deadline.IsZero() {
		sv.st = p.Schedule.Stops(p.Deadline)
	}
	sv.term, sv.kill = timerAt(sv.st.TermAt), timerAt(sv.st.KillAt)
	defer sv.term.Stop()
	defer sv.kill.Stop()
	if !g.killAt.Equal(sv.st.KillAt) {
		g.setKillAt(sv.st.KillAt)
	}
	changes := make(chan Change)
	ctx, cancel := context.WithCancel(context.Background())
	kept := make(chan struct{})
	if p.Lease != nil && !p.Deadline.IsZero() {
		k := &Keeper{Lease: p.Lease, Schedule: p.Schedule, Stopped: g.stops.Stopped}
		go func() {
			defer close(kept)
			k.Run(ctx, changes)
		}()
	} else {
		close(kept)
	}
	sv.loop(changes)
	cancel()
	<-kept
	g.Close()
	sv.out.State = g.State()
	sv.closed()
	return sv.out
}

// closed notes and reports what the command left behind, now that the group is closed.
func (sv *supervision) closed() {
	g, out := sv.g, &sv.out
	out.Outlived, out.Undrained, out.Escaped = g.outlived, g.undrained, g.escaped
	if g.cg == nil {
		out.NoCgroup = g.whyNoCgroup
	}
	if len(out.Outlived) > 0 {
		sv.notice(Event{Kind: EventOutlived, Pids: out.Outlived, Err: out.Undrained})
	}
	if len(out.Escaped) > 0 {
		sv.notice(Event{Kind: EventEscaped, Pids: out.Escaped, Err: out.NoCgroup})
	}
}

// supervision is the state of one Supervise, owned by its goroutine.
type supervision struct {
	g          *Group
	p          Plan
	notice     func(Event)
	st         Stops // the current stops
	term, kill *time.Timer
	termSent   bool
	out        Outcome
}

func (sv *supervision) loop(changes <-chan Change) {
	g := sv.g
	signals := 0
	echoes := map[syscall.Signal]int{} // signals latch passed on, the guard will report back
	second := func() bool {
		signals++
		if signals < 2 || sv.out.Escalated {
			return signals >= 2
		}
		sv.out.Escalated = true
		sv.notice(Event{Kind: EventEscalate})
		g.kill()
		return true
	}
	for {
		select {
		case <-g.done:
			sv.exited()
			return
		case s := <-sv.p.Signals:
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
		case c := <-changes:
			sv.changed(c)
		case <-sv.term.C:
			sv.ending()
			sv.notice(Event{Kind: EventTerm, At: sv.st.End, Held: sv.st.Held})
			sv.sendTerm()
		case <-sv.kill.C:
			sv.ending()
			sv.notice(Event{Kind: EventKill, At: sv.st.End, Held: sv.st.Held})
			g.kill()
		}
	}
}

// ending records that the command is being stopped for the current end.
func (sv *supervision) ending() {
	if sv.st.Held {
		sv.out.HoldEnded = true
	} else {
		sv.out.LeaseEnded = true
	}
}

// sendTerm sends SIGTERM, then SIGCONT so that a stopped command gets to handle it.
func (sv *supervision) sendTerm() {
	sv.termSent = true
	sv.term.Stop()
	sv.g.Signal(syscall.SIGTERM)
	sv.g.Signal(syscall.SIGCONT)
}

// changed applies what the Keeper learnt.
func (sv *supervision) changed(c Change) {
	switch c.Kind {
	case Extended:
		sv.moveTo(sv.p.Schedule.Stops(c.Deadline), true)
		sv.notice(Event{Kind: EventExtended, At: c.Deadline})
	case Earlier:
		sv.moveTo(sv.p.Schedule.Stops(c.Deadline), false)
	case Lost:
		sv.out.Lost, sv.out.LeaseEnded = true, true
		sv.notice(Event{Kind: EventLost, Err: c.Err})
		if !sv.termSent {
			sv.sendTerm()
		}
		st := sv.st
		if at := time.Now().Add(sv.p.Schedule.Grace); at.Before(st.KillAt) {
			st.KillAt = at
		}
		st.Held = false
		sv.moveTo(st, false)
	case Unsupported:
		sv.notice(Event{Kind: EventUnsupported, At: sv.st.End, Err: c.Err})
	case Failed:
		sv.notice(Event{Kind: EventExtendFailed, At: sv.st.End, Err: c.Err})
	case Paused:
		sv.notice(Event{Kind: EventPaused, At: sv.st.TermAt})
	}
}

// moveTo makes st the stops: any of its times when later is true (a confirmed extension),
// else only those earlier than now. Once SIGTERM was sent, the SIGKILL never moves later.
func (sv *supervision) moveTo(st Stops, later bool) {
	cur := &sv.st
	if !sv.termSent && (later || st.TermAt.Before(cur.TermAt)) {
		cur.TermAt, cur.End, cur.Held = st.TermAt, st.End, st.Held
		resetAt(sv.term, cur.TermAt)
	}
	if st.KillAt.Before(cur.KillAt) || later && !sv.termSent && st.KillAt.After(cur.KillAt) {
		cur.KillAt = st.KillAt
		resetAt(sv.kill, cur.KillAt)
		sv.g.setKillAt(cur.KillAt)
	}
}

// exited notes how the command ended: a SIGKILL from the guard at the kill deadline (latch
// was too slow to send its own) is the lease's end too.
func (sv *supervision) exited() {
	ws, ok := sv.g.State().Sys().(syscall.WaitStatus)
	if sv.out.LeaseEnded || sv.out.HoldEnded || sv.out.Escalated || sv.st.KillAt.IsZero() || !ok ||
		!ws.Signaled() || ws.Signal() != syscall.SIGKILL || time.Now().Before(sv.st.KillAt.Add(-KillMargin)) {
		return
	}
	sv.ending()
}

// timerAt is a timer firing at t, or never for the zero time.
func timerAt(t time.Time) *time.Timer {
	tm := time.NewTimer(time.Hour)
	resetAt(tm, t)
	return tm
}

// resetAt makes tm fire at t (never for the zero time). Since Go 1.23 a stopped or reset
// timer delivers no stale value.
func resetAt(tm *time.Timer, t time.Time) {
	if t.IsZero() {
		tm.Stop()
		return
	}
	tm.Reset(time.Until(t))
}
