package client

// Ticket.KeepAlive against the fake server speaking revision 2, on the fake clock: its
// schedule, its retries, and the causes its ticket's context ends with.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// advanceTo waits until a timer is armed at at (the keep-alive's next step) and moves the
// clock there.
func advanceTo(t *testing.T, clk *clustertest.FakeClock, at time.Time, what string) {
	t.Helper()
	eventually(t, clustertest.Bound, what, func() bool { return clk.HasTimerAt(at) })
	clk.Advance(at.Sub(clk.Now()))
}

// stopped waits until tk has no keep-alive running.
func stopped(t *testing.T, tk *Ticket) {
	t.Helper()
	eventually(t, clustertest.Bound, "keep-alive stopped", func() bool {
		tk.mu.Lock()
		defer tk.mu.Unlock()
		return tk.x == nil || tk.x.ka == nil
	})
}

// alive fails if ctx ends within a short while.
func alive(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatalf("ticket context ended: %v", context.Cause(ctx))
	case <-time.After(50 * time.Millisecond):
	}
}

// The happy path: an extension every third of the lease, counted from the start of the
// current lease; Release stops the keep-alive and then releases.
func TestKeepAliveExtends(t *testing.T) {
	cl, clk, _, fc, tk := revisedTicket(t)
	start := clk.Now()
	ctx := tk.Context()
	if err := tk.KeepAlive(context.Background(), 0); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	for i := 1; i <= 3; i++ {
		at := start.Add(time.Duration(i) * 10 * time.Second)
		advanceTo(t, clk, at, "next extension scheduled")
		e := expectExtend(t, fc, tk, 30)
		clk.Advance(40 * time.Millisecond) // the answer takes 40 ms: the lease counts from the write
		fc.send(t, short(wire.OpExtend, e.Owner))
		eventually(t, clustertest.Bound, "deadline moved", func() bool { return tk.CurrentDeadline().Equal(at.Add(span30)) })
		alive(t, ctx)
	}
	if err := tk.Extend(context.Background(), time.Minute); !errors.Is(err, ErrExtendInProgress) {
		t.Fatalf("Extend while the keep-alive runs: %v, want ErrExtendInProgress", err)
	}
	if err := tk.KeepAlive(context.Background(), 0); !errors.Is(err, ErrExtendInProgress) {
		t.Fatalf("a second KeepAlive: %v, want ErrExtendInProgress", err)
	}
	done := make(chan error, 1)
	go func() { done <- tk.Release(context.Background()) }()
	r := fc.expect(t, wire.OpRelease)
	fc.send(t, short(wire.OpRelease, r.Owner))
	if err := waitErr(t, done, clustertest.Bound, "Release"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	ended(t, ctx, context.Canceled, ErrTicketEnded)
	stopped(t, tk)
	clk.Advance(time.Minute)
	fc.silent(t, 100*time.Millisecond)
	if st := cl.Stats(); st.Extended != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// A grant's age moves the schedule: the first extension comes every after the lease started.
func TestKeepAliveCountsFromTheLeaseStart(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeServer(t, withLeases())
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, PingInterval: time.Hour})
	fc := fs.next(t)
	start := clk.Now()
	ch := acquireAsync(cl, context.Background(), "k", 0, AcquireOptions{Wait: 5 * time.Second, Lease: 30 * time.Second})
	a := fc.expect(t, wire.OpAcquire)
	clk.Advance(1500 * time.Millisecond)
	fc.send(t, grantedAge(a.Owner, 9, 1000)) // deadline: (1 s + 30 s) x 0.999 = 30.969 s
	r := wait(t, ch, clustertest.Bound)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.t.KeepAlive(context.Background(), 2*time.Second); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	// The lease started at written_at + 0.999 s as the client counts it: 2 s after that, moved
	// back onto the 250 ms grid (the fake clock starts on a whole second).
	first := start.Add(2750 * time.Millisecond)
	if got := KeepAliveStart(start.Add(2999*time.Millisecond), 2*time.Second); !got.Equal(first) {
		t.Fatalf("KeepAliveStart %v, want %v", got.Sub(start), first.Sub(start))
	}
	advanceTo(t, clk, first, "first extension scheduled")
	e := expectExtend(t, fc, r.t, 30)
	fc.send(t, short(wire.OpExtend, e.Owner))
	eventually(t, clustertest.Bound, "deadline moved", func() bool {
		return r.t.CurrentDeadline().Equal(first.Add(span30))
	})
	advanceTo(t, clk, first.Add(2*time.Second), "second extension scheduled (on the grid, every after the first)")
	expectExtend(t, fc, r.t, 30)
	r.t.stopKeepAlive()
}

// No answer: each attempt is bounded, asked again, and when only `every` of the lease is left
// the context ends at that very moment with ErrTicketUnconfirmed.
func TestKeepAliveGivesUpBeforeTheDeadline(t *testing.T) {
	_, clk, fs, fc, tk := revisedTicket(t)
	start := clk.Now()
	ctx := tk.Context()
	if err := tk.KeepAlive(context.Background(), 0); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	advanceTo(t, clk, start.Add(10*time.Second), "first extension scheduled")
	e1 := expectExtend(t, fc, tk, 30)
	clk.Advance(IOTimeout) // the attempt's bound: no answer, its connection is closed
	fc.closed(t, clustertest.Bound)
	fc2 := fs.next(t)
	e2 := expectExtend(t, fc2, tk, 30) // asked again, by a new attempt
	if e2.Owner == e1.Owner {
		t.Fatalf("the second attempt reused owner %d: it is a new call", e1.Owner)
	}
	// The round ends at deadline - every = 29.97 s - 10 s.
	clk.Advance(start.Add(span30-10*time.Second).Sub(clk.Now()) - time.Nanosecond)
	alive(t, ctx)
	clk.Advance(time.Nanosecond)
	ended(t, ctx, context.Canceled, ErrTicketUnconfirmed)
	if left := tk.Remaining(); left != 10*time.Second {
		t.Fatalf("Remaining %v, want 10s: the lease may still run to its deadline", left)
	}
	stopped(t, tk)
	fc2.closed(t, clustertest.Bound) // that attempt ended with the round: no answer
	fs.next(t).silent(t, 100*time.Millisecond)
	if err := tk.Extend(context.Background(), time.Minute); !errors.Is(err, ErrTicketUnconfirmed) {
		t.Fatalf("Extend after the keep-alive gave up: %v", err)
	}
}

func TestKeepAliveFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(owner uint64) wire.Response
		cause  error
		also   error
	}{
		{"N: lost", func(o uint64) wire.Response { return short(wire.OpNotHeld, o) }, ErrTicketLost, nil},
		{"E unsupported", func(o uint64) wire.Response { return errResp(o, wire.ReasonUnsupported) }, ErrTicketUnconfirmed, ErrUnsupported},
		{"E internal", func(o uint64) wire.Response { return errResp(o, wire.ReasonInternal) }, ErrTicketUnconfirmed, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, clk, _, fc, tk := revisedTicket(t)
			start := clk.Now()
			ctx := tk.Context()
			if err := tk.KeepAlive(context.Background(), 0); err != nil {
				t.Fatalf("KeepAlive: %v", err)
			}
			advanceTo(t, clk, start.Add(10*time.Second), "first extension scheduled")
			e := expectExtend(t, fc, tk, 30)
			fc.send(t, tc.answer(e.Owner))
			ended(t, ctx, context.Canceled, tc.cause) // at once: a definite failure
			if tc.also != nil && !errors.Is(context.Cause(ctx), tc.also) {
				t.Fatalf("Cause %v, want %v too", context.Cause(ctx), tc.also)
			}
			stopped(t, tk)
			fc.silent(t, 100*time.Millisecond)
		})
	}
	t.Run("E unavailable, then L", func(t *testing.T) {
		_, clk, fs, fc, tk := revisedTicket(t)
		start := clk.Now()
		ctx := tk.Context()
		if err := tk.KeepAlive(context.Background(), 0); err != nil {
			t.Fatalf("KeepAlive: %v", err)
		}
		advanceTo(t, clk, start.Add(10*time.Second), "first extension scheduled")
		e := expectExtend(t, fc, tk, 30)
		fc.send(t, errResp(e.Owner, wire.ReasonUnavailable))
		fc2 := fs.next(t)
		e2 := expectExtend(t, fc2, tk, 30)
		fc2.send(t, short(wire.OpExtend, e2.Owner))
		eventually(t, clustertest.Bound, "deadline moved", func() bool { return tk.CurrentDeadline().Equal(start.Add(10*time.Second + span30)) })
		alive(t, ctx)
		tk.stopKeepAlive()
	})
	t.Run("client closed", func(t *testing.T) {
		cl, _, _, _, tk := revisedTicket(t)
		ctx := tk.Context()
		if err := tk.KeepAlive(context.Background(), 0); err != nil {
			t.Fatalf("KeepAlive: %v", err)
		}
		cl.Close()
		ended(t, ctx, context.Canceled, ErrTicketUnconfirmed)
		if !errors.Is(context.Cause(ctx), ErrClosed) {
			t.Fatalf("Cause %v, want ErrClosed too", context.Cause(ctx))
		}
		stopped(t, tk)
	})
}

// Canceling the keep-alive's context stops it; the ticket keeps its deadline.
func TestKeepAliveStoppedByItsContext(t *testing.T) {
	_, clk, _, fc, tk := revisedTicket(t)
	start := clk.Now()
	ctx := tk.Context()
	kctx, cancel := context.WithCancel(context.Background())
	if err := tk.KeepAlive(kctx, 0); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	eventually(t, clustertest.Bound, "first extension scheduled", func() bool { return clk.HasTimerAt(start.Add(10 * time.Second)) })
	cancel()
	stopped(t, tk)
	clk.Advance(10 * time.Second)
	fc.silent(t, 100*time.Millisecond)
	alive(t, ctx)
	clk.Advance(span30 - 10*time.Second)
	ended(t, ctx, context.DeadlineExceeded, ErrTicketEnded)
}

func TestKeepAliveArguments(t *testing.T) {
	_, _, _, fc, tk := revisedTicket(t)
	for _, every := range []time.Duration{-time.Nanosecond, 10*time.Second + 1, time.Minute} {
		if err := tk.KeepAlive(context.Background(), every); !errors.Is(err, ErrUnsupportedDuration) {
			t.Fatalf("KeepAlive(%v): %v, want ErrUnsupportedDuration", every, err)
		}
	}
	ch := extendAsync(tk, context.Background(), time.Minute)
	e := expectExtend(t, fc, tk, 60)
	if err := tk.KeepAlive(context.Background(), 0); !errors.Is(err, ErrExtendInProgress) {
		t.Fatalf("KeepAlive with an Extend in flight: %v, want ErrExtendInProgress", err)
	}
	fc.send(t, short(wire.OpExtend, e.Owner))
	if err := waitErr(t, ch, clustertest.Bound, "Extend"); err != nil {
		t.Fatal(err)
	}
	// The ticket's lease is now 60 s: a third of it is allowed.
	if err := tk.KeepAlive(context.Background(), 20*time.Second); err != nil {
		t.Fatalf("KeepAlive(20s) after a 60 s extension: %v", err)
	}
	tk.stopKeepAlive()

	fs := newFakeServer(t) // latch/1
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
	fc1 := fs.next(t)
	rch := acquireAsync(cl, context.Background(), "k", 0, AcquireOptions{})
	a := fc1.expect(t, wire.OpAcquire)
	fc1.send(t, granted(a.Owner, 3))
	r := wait(t, rch, clustertest.Bound)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.t.KeepAlive(context.Background(), 0); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("KeepAlive on latch/1: %v, want ErrUnsupported", err)
	}
	fc1.silent(t, 100*time.Millisecond)
	if r.t.Context().Err() != nil {
		t.Fatal("a refused keep-alive ended the ticket")
	}
}

// KeepAliveStart moves a moment back onto the grid of its interval: never later, at most
// every/8 earlier, on a multiple of the step, and a moment on the grid stays where it is.
func TestKeepAliveStartIsOnTheGrid(t *testing.T) {
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		every, step time.Duration
	}{
		{10 * time.Second, 250 * time.Millisecond},
		{3 * time.Second, 250 * time.Millisecond},
		{time.Second, 125 * time.Millisecond},
		{333 * time.Millisecond, 333 * time.Millisecond / 8},
		{time.Hour, time.Hour / 14400},
	} {
		for _, off := range []time.Duration{0, 1, c.step - 1, c.step, 7*c.step + 3, 977 * time.Millisecond} {
			at := base.Add(off)
			got := KeepAliveStart(at, c.every)
			switch {
			case got.After(at):
				t.Errorf("every %v, +%v: %v is later", c.every, off, got.Sub(base))
			case at.Sub(got) >= c.step || at.Sub(got) > c.every/8:
				t.Errorf("every %v, +%v: %v is %v early, want under %v", c.every, off, got.Sub(base), at.Sub(got), c.step)
			case got.UnixNano()%int64(c.step) != 0:
				t.Errorf("every %v, +%v: %v is off the grid of %v", c.every, off, got.Sub(base), c.step)
			case !KeepAliveStart(got, c.every).Equal(got):
				t.Errorf("every %v, +%v: a moment on the grid moved", c.every, off)
			}
		}
	}
}

// Two keep-alives of one client with one interval, whose leases began at different moments
// of one step, extend at the same moment (so their frames can share writes and reads).
func TestKeepAlivesOfOneClientExtendTogether(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeServer(t, withLeases())
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, PingInterval: time.Hour})
	fc := fs.next(t)
	start := clk.Now()
	var tks []*Ticket
	for i, key := range []string{"a", "b"} {
		ch := acquireAsync(cl, context.Background(), key, 0, AcquireOptions{Wait: 5 * time.Second, Lease: 30 * time.Second})
		a := fc.expect(t, wire.OpAcquire)
		fc.send(t, grantedAge(a.Owner, uint64(7+i), 0))
		r := wait(t, ch, clustertest.Bound)
		if r.err != nil {
			t.Fatal(r.err)
		}
		tks = append(tks, r.t)
		clk.Advance(100 * time.Millisecond) // b's lease starts 100 ms after a's
	}
	for _, tk := range tks {
		if err := tk.KeepAlive(context.Background(), 10*time.Second); err != nil {
			t.Fatalf("KeepAlive: %v", err)
		}
	}
	// a is due at +10 s, b at +10.1 s: both rounds begin at +10 s, on the grid.
	advanceTo(t, clk, start.Add(10*time.Second), "the rounds scheduled at +10 s")
	seen := map[uint64]bool{}
	for range tks {
		r := fc.expect(t, wire.OpExtend)
		seen[r.Token] = true
		fc.send(t, short(wire.OpExtend, r.Owner))
	}
	if !seen[7] || !seen[8] {
		t.Fatalf("extended tokens %v at +10 s, want 7 and 8", seen)
	}
	for _, tk := range tks {
		tk.stopKeepAlive()
	}
}
