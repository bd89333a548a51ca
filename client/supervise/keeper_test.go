package supervise

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/wire"
)

// testClock is a client.Clock that moves only when advanced; timers fire in the advancing
// goroutine, in order.
type testClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*testTimer
}

type testTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	tm := &testTimer{at: c.now.Add(d), f: f}
	if d <= 0 {
		c.mu.Unlock()
		f()
		return func() bool { return false }
	}
	c.timers = append(c.timers, tm)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !tm.stopped
		tm.stopped = true
		return was
	}
}

// advance moves the clock on by d, firing the timers due on the way.
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		var due *testTimer
		for len(c.timers) > 0 && (c.timers[0].stopped || !c.timers[0].at.After(end)) {
			tm := c.timers[0]
			c.timers = c.timers[1:]
			if !tm.stopped {
				due = tm
				break
			}
		}
		if due == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		c.now, due.stopped = due.at, true
		c.mu.Unlock()
		due.f()
	}
}

// nextTimer is when the earliest live timer fires (zero: none).
func (c *testClock) nextTimer() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, tm := range c.timers {
		if !tm.stopped && (next.IsZero() || tm.at.Before(next)) {
			next = tm.at
		}
	}
	return next
}

// errHang is a fake extend result: no answer until the attempt's bound, then ErrIndeterminate.
var errHang = errors.New("errHang")

// attempt is one call of fakeLease.Extend: when it began and when its bound ended it.
type attempt struct{ at, end time.Duration }

// fakeLease is an Extender on a testClock. results[i] is the i-th attempt's result (errHang: no
// answer within its bound); after them, every attempt succeeds, until stopAfter attempts,
// when it cancels the run. Success ends the lease lease after the attempt began; an unknown
// outcome makes it the earlier of that and the old end, as the client counts it.
type fakeLease struct {
	clock     *testClock
	lease     time.Duration // of each attempt (short: a shorter lease than the acquire's)
	deadline  time.Time
	results   []error
	stopAfter int
	cancel    func()
	calls     []attempt
}

func (f *fakeLease) CurrentDeadline() time.Time { return f.deadline }

func (f *fakeLease) Extend(ctx context.Context, lease time.Duration) error {
	start := f.clock.Now()
	a := attempt{at: start.Sub(t0), end: f.clock.nextTimer().Sub(t0)}
	f.calls = append(f.calls, a)
	if len(f.calls) == f.stopAfter {
		f.cancel()
	}
	var err error
	if i := len(f.calls) - 1; i < len(f.results) {
		err = f.results[i]
	}
	end := start.Add(f.lease)
	switch {
	case err == errHang:
		f.clock.advance(f.clock.nextTimer().Sub(start)) // the attempt's bound: it cancels ctx
		if ctx.Err() == nil {
			panic("the attempt's context did not end at its bound")
		}
		err = fmt.Errorf("%w: no answer in time", client.ErrIndeterminate)
		fallthrough
	case errors.Is(err, client.ErrIndeterminate):
		if end.Before(f.deadline) {
			f.deadline = end
		}
	case err == nil:
		if !start.Before(f.deadline) {
			return client.ErrTicketEnded
		}
		f.deadline = end
	}
	return err
}

// keep runs a Keeper on a lease that ends at first, with a 30 s lease and a 10 s grace
// (Period 6.67 s) unless s says otherwise, until it returns; it returns the attempts and the
// changes.
func keep(t *testing.T, f *fakeLease, s Schedule, first time.Duration, stopped func() bool) ([]attempt, []Change) {
	t.Helper()
	if s.Lease == 0 {
		s.Lease, s.Grace = 30*time.Second, 10*time.Second
	}
	if f.lease == 0 {
		f.lease = s.Lease
	}
	f.clock = &testClock{now: t0}
	f.deadline = at(first)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.cancel = cancel
	out := make(chan Change, 1000)
	k := &Keeper{Lease: f, Schedule: s, Stopped: stopped, Clock: f.clock, advance: f.clock.advance}
	k.Run(ctx, out)
	close(out)
	var changes []Change
	for c := range out {
		changes = append(changes, c)
	}
	return f.calls, changes
}

const period = 20 * time.Second / 3

// Confirmed extensions follow one another a Period apart, each moving the deadline; each
// attempt is bounded by a Period.
func TestKeeperExtendsEveryPeriod(t *testing.T) {
	f := &fakeLease{stopAfter: 4}
	calls, changes := keep(t, f, Schedule{}, 30*time.Second, nil)
	if len(calls) != 4 {
		t.Fatalf("attempts %v, want 4", calls)
	}
	for i, a := range calls {
		want := time.Duration(i+1) * period
		if d := a.at - want; d < 0 || d > 10*time.Nanosecond {
			t.Errorf("attempt %d at %v, want %v", i, a.at, want)
		}
		if a.end-a.at != period {
			t.Errorf("attempt %d bounded at %v, want a Period after its start", i, a.end)
		}
	}
	if len(changes) < 3 {
		t.Fatalf("changes %+v, want an Extended for each attempt", changes)
	}
	for i, c := range changes {
		if c.Kind != Extended || !c.Deadline.Equal(at(calls[i].at+30*time.Second)) {
			t.Errorf("change %d: %+v, want Extended to 30 s after attempt %d", i, c, i)
		}
	}
}

// Attempts without an answer are followed by others, after a backoff, each bounded by a
// Period and by the SIGTERM; none begins at or after the SIGTERM, and the Keeper then stops
// without a change: the lease's end stops the command.
func TestKeeperUnansweredAttemptsEndAtTheTerm(t *testing.T) {
	f := &fakeLease{results: []error{errHang, errHang, errHang, errHang, errHang, errHang}}
	calls, changes := keep(t, f, Schedule{}, 30*time.Second, nil)
	termAt := 20 * time.Second
	if len(calls) < 2 || len(calls) > 4 {
		t.Fatalf("attempts %v, want 2 or 3 of a Period each before the SIGTERM at %v", calls, termAt)
	}
	for i, a := range calls {
		if a.at >= termAt || a.end > termAt || a.end-a.at > period {
			t.Errorf("attempt %d [%v, %v] is not within a Period before the SIGTERM %v", i, a.at, a.end, termAt)
		}
	}
	if len(changes) != 0 {
		t.Fatalf("changes %+v, want none (the outcome unknown never moves the deadline later)", changes)
	}
}

// An unknown outcome of an extend with a shorter lease moves the deadline, and the round's
// end, earlier.
func TestKeeperUnknownShorterLeaseMovesEarlier(t *testing.T) {
	f := &fakeLease{lease: 20 * time.Second, results: []error{errHang}, stopAfter: 2}
	calls, changes := keep(t, f, Schedule{}, 30*time.Second, nil)
	if len(changes) < 1 || changes[0].Kind != Earlier || !changes[0].Deadline.Equal(at(calls[0].at+20*time.Second)) {
		t.Fatalf("changes %+v, want Earlier to the first attempt's start plus 20 s", changes)
	}
	if term := calls[0].at + 10*time.Second; len(calls) != 2 || calls[1].end != term {
		t.Fatalf("attempts %v: the second must end at the new SIGTERM %v", calls, term)
	}
}

// Refusals that say nothing definite (unavailable, timeout, queue full) are asked again
// within the round; the confirmed one moves the deadline.
func TestKeeperRetriesRefusals(t *testing.T) {
	unavailable := &client.ServerError{Reason: wire.ReasonUnavailable}
	f := &fakeLease{results: []error{unavailable, client.ErrTimeout, client.ErrQueueFull}, stopAfter: 5}
	calls, changes := keep(t, f, Schedule{}, 30*time.Second, nil)
	if len(calls) != 5 {
		t.Fatalf("attempts %v, want 3 refused, 1 confirmed, and the next round's", calls)
	}
	if gap := calls[3].at - calls[0].at; gap <= 0 || gap > 3*backoffMax {
		t.Fatalf("attempts %v: the retries took %v", calls, gap)
	}
	if len(changes) < 1 || changes[0].Kind != Extended || !changes[0].Deadline.Equal(at(calls[3].at+30*time.Second)) {
		t.Fatalf("changes %+v, want Extended from the fourth attempt first", changes)
	}
}

// Definite answers end the Keeper at once with their change: N is Lost, E unsupported (or a
// pool without revision 2) Unsupported, another E Failed.
func TestKeeperDefiniteFailures(t *testing.T) {
	for _, c := range []struct {
		err  error
		want ChangeKind
	}{
		{fmt.Errorf("%w: not held", client.ErrTicketLost), Lost},
		{client.ErrNotHeld, Lost},
		{fmt.Errorf("%w: no revision 2", client.ErrUnsupported), Unsupported},
		{&client.ServerError{Reason: wire.ReasonUnsupported}, Unsupported},
		{&client.ServerError{Reason: wire.ReasonInternal}, Failed},
		{client.ErrClosed, Failed},
	} {
		f := &fakeLease{results: []error{c.err}}
		calls, changes := keep(t, f, Schedule{}, 30*time.Second, nil)
		if len(calls) != 1 || len(changes) != 1 || changes[0].Kind != c.want || !errors.Is(changes[0].Err, c.err) {
			t.Errorf("%v: attempts %v, changes %+v, want one attempt and change %v", c.err, calls, changes, c.want)
		}
	}
}

// While the command is stopped nothing is sent; the Keeper says so once, and extends when it
// continues. Stopped until the SIGTERM, it sends nothing at all.
func TestKeeperNothingWhileStopped(t *testing.T) {
	contAt := period + 3*time.Second
	f := &fakeLease{stopAfter: 1}
	calls, changes := keep(t, f, Schedule{}, 30*time.Second, func() bool { return f.clock.Now().Before(at(contAt)) })
	if len(calls) != 1 || calls[0].at < contAt {
		t.Fatalf("attempts %v, want one, once the command continued at %v", calls, contAt)
	}
	if len(changes) < 1 || changes[0].Kind != Paused {
		t.Fatalf("changes %+v, want Paused first", changes)
	}
	for _, c := range changes[1:] {
		if c.Kind == Paused {
			t.Fatalf("changes %+v: Paused more than once for one stop", changes)
		}
	}

	f = &fakeLease{}
	calls, changes = keep(t, f, Schedule{}, 30*time.Second, func() bool { return true })
	if len(calls) != 0 || len(changes) != 1 || changes[0].Kind != Paused {
		t.Fatalf("stopped throughout: attempts %v, changes %+v, want none and one Paused", calls, changes)
	}
	if now := f.clock.Now(); now.Before(at(20 * time.Second)) {
		t.Fatalf("the Keeper returned at %v, before the SIGTERM", now.Sub(t0))
	}
}

// A first deadline with less than a full lease left (a latch/1 grant after a wait) is
// extended at once; the hold cap ends the extensions once the lease reaches it.
func TestKeeperShortFirstDeadlineAndHoldCap(t *testing.T) {
	f := &fakeLease{stopAfter: 1}
	calls, _ := keep(t, f, Schedule{}, 12*time.Second, nil)
	if len(calls) != 1 || calls[0].at != 0 {
		t.Fatalf("attempts %v, want one at once", calls)
	}
	f = &fakeLease{}
	calls, changes := keep(t, f, Schedule{Lease: 30 * time.Second, Grace: 10 * time.Second, HoldEnd: at(50 * time.Second)}, 30*time.Second, nil)
	// Extended to 36.7 s, 43.3 s, 50 s: the cap is reached.
	if len(calls) != 3 || len(changes) != 3 || changes[2].Deadline.Before(at(50*time.Second)) || !changes[1].Deadline.Before(at(50*time.Second)) {
		t.Fatalf("attempts %v, changes %+v, want extensions until the lease reaches the cap at 50 s, then none", calls, changes)
	}
}
