package client

// A ticket's life on a revised connection: its context and the causes it ends with, Extend
// and its outcomes, and the keep-alive. The fake server speaks revision 2; the fake clock
// makes every deadline exact.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// revisedTicket connects a one-connection client on the fake clock to a fake server that
// speaks revision 2 and acquires "k" with lease 30 s, granted with age 0 at once: its
// deadline is the start + 29.97 s.
func revisedTicket(t *testing.T, opts ...fakeOption) (*Client, *clustertest.FakeClock, *fakeServer, *fakeConn, *Ticket) {
	t.Helper()
	clk := newFakeClock()
	fs := newFakeServer(t, append([]fakeOption{withLeases()}, opts...)...)
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, PingInterval: time.Hour, Logger: testLogger(t)})
	fc := fs.next(t)
	ch := acquireAsync(cl, context.Background(), "k", 0, AcquireOptions{Lease: 30 * time.Second})
	a := fc.expect(t, wire.OpAcquire)
	fc.send(t, grantedAge(a.Owner, 9, 0))
	r := wait(t, ch, clustertest.Bound)
	if r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	if want := clk.Now().Add(29970 * time.Millisecond); !r.t.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want %v", r.t.Deadline, want)
	}
	return cl, clk, fs, fc, r.t
}

// ended checks that ctx and a child of it are done with err and a cause that is want.
func ended(t *testing.T, ctx context.Context, err, want error) {
	t.Helper()
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	late, cancelLate := context.WithTimeout(ctx, time.Hour) // its deadline is the parent's
	defer cancelLate()
	for name, c := range map[string]context.Context{"context": ctx, "child": child, "child with a later timeout": late} {
		doneWithin(t, c, clustertest.Bound, name+" not done")
		if !errors.Is(c.Err(), err) {
			t.Fatalf("%s: Err %v, want %v", name, c.Err(), err)
		}
		if cause := context.Cause(c); !errors.Is(cause, want) {
			t.Fatalf("%s: Cause %v, want %v", name, cause, want)
		}
	}
}

func TestTicketContextCauses(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		_, clk, _, _, tk := revisedTicket(t)
		ctx := tk.Context()
		child, cancel := context.WithCancel(ctx) // attached before the end
		defer cancel()
		if context.Cause(ctx) != nil || ctx.Err() != nil {
			t.Fatalf("Cause %v, Err %v before the end", context.Cause(ctx), ctx.Err())
		}
		clk.Advance(tk.Remaining())
		ended(t, ctx, context.DeadlineExceeded, ErrTicketEnded)
		ended(t, child, context.DeadlineExceeded, ErrTicketEnded)
		if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			t.Fatalf("Cause %v, want DeadlineExceeded too", context.Cause(ctx))
		}
	})
	t.Run("released", func(t *testing.T) {
		_, _, _, fc, tk := revisedTicket(t)
		ctx := tk.Context()
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- tk.Release(context.Background()) }()
		r := fc.expect(t, wire.OpRelease)
		fc.send(t, short(wire.OpRelease, r.Owner))
		if err := waitErr(t, done, clustertest.Bound, "Release"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		ended(t, ctx, context.Canceled, ErrTicketEnded)
		ended(t, child, context.Canceled, ErrTicketEnded)
		ended(t, tk.Context(), context.Canceled, ErrTicketEnded)
	})
	t.Run("context asked for after the end", func(t *testing.T) {
		_, clk, _, _, tk := revisedTicket(t)
		clk.Advance(time.Minute)
		ended(t, tk.Context(), context.DeadlineExceeded, ErrTicketEnded)
		if tk.Remaining() != 0 {
			t.Fatalf("Remaining %v after the deadline", tk.Remaining())
		}
	})
}

// extendAsync runs tk.Extend in a goroutine and returns where its error will arrive.
func extendAsync(tk *Ticket, ctx context.Context, lease time.Duration) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- tk.Extend(ctx, lease) }()
	return ch
}

// expectExtend reads the next request, which must be an extend of tk with lease seconds.
func expectExtend(t *testing.T, fc *fakeConn, tk *Ticket, lease uint16) wire.Request {
	t.Helper()
	e := fc.expect(t, wire.OpExtend)
	if e.Token != tk.Token || string(e.Key) != tk.Key || e.Lease != lease || e.Owner == 0 {
		t.Fatalf("extend %+v, want token %d key %q lease %d", e, tk.Token, tk.Key, lease)
	}
	return e
}

// deadlineIs checks tk's current deadline, written_at-relative to start.
func deadlineIs(t *testing.T, tk *Ticket, start time.Time, want time.Duration) {
	t.Helper()
	if got := tk.CurrentDeadline().Sub(start); got != want {
		t.Fatalf("CurrentDeadline start + %v, want + %v", got, want)
	}
}

const (
	span30 = 29970 * time.Millisecond // 30 s x (1 - 0.001)
	span60 = 59940 * time.Millisecond
	span10 = 9990 * time.Millisecond
)

func TestExtendConfirmed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lease time.Duration
		want  uint16
		span  time.Duration
	}{
		{"longer lease", time.Minute, 60, span60},
		{"shorter lease replaces the end", 10 * time.Second, 10, span10},
		{"0 is the default lease", 0, 30, span30},
		{"rounded up to whole seconds", 9*time.Second + 1, 10, span10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, clk, _, fc, tk := revisedTicket(t)
			start := clk.Now()
			ctx := tk.Context()
			clk.Advance(5 * time.Second)
			ch := extendAsync(tk, context.Background(), tc.lease)
			e := expectExtend(t, fc, tk, tc.want)
			// In flight, a shorter lease already counts.
			deadlineIs(t, tk, start, min(span30, 5*time.Second+tc.span))
			clk.Advance(100 * time.Millisecond)
			fc.send(t, short(wire.OpExtend, e.Owner))
			if err := waitErr(t, ch, clustertest.Bound, "Extend"); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			deadlineIs(t, tk, start, 5*time.Second+tc.span) // written_at + lease x (1 - rho)
			if !tk.Deadline.Equal(start.Add(span30)) {
				t.Fatalf("Deadline moved to %v: it is the grant's", tk.Deadline)
			}
			if dl, _ := ctx.Deadline(); !dl.Equal(tk.CurrentDeadline()) {
				t.Fatalf("Context().Deadline() %v, want %v", dl, tk.CurrentDeadline())
			}
			if st := cl.Stats(); st.Extended != 1 {
				t.Fatalf("stats %+v", st)
			}
			// The context ends at the new deadline, not at the old one.
			clk.Advance(tk.Remaining() - time.Nanosecond)
			select {
			case <-ctx.Done():
				t.Fatalf("context done %v before its new deadline: %v", time.Nanosecond, context.Cause(ctx))
			case <-time.After(50 * time.Millisecond):
			}
			clk.Advance(time.Nanosecond)
			ended(t, ctx, context.DeadlineExceeded, ErrTicketEnded)
		})
	}
}

func TestExtendNotHeldLosesTheTicket(t *testing.T) {
	cl, _, _, fc, tk := revisedTicket(t)
	ctx := tk.Context()
	ch := extendAsync(tk, context.Background(), time.Minute)
	e := expectExtend(t, fc, tk, 60)
	fc.send(t, short(wire.OpNotHeld, e.Owner))
	err := waitErr(t, ch, clustertest.Bound, "Extend")
	if !errors.Is(err, ErrTicketLost) || !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend: %v, want ErrTicketLost and ErrNotHeld", err)
	}
	ended(t, ctx, context.Canceled, ErrTicketLost)
	if tk.Remaining() != 0 {
		t.Fatalf("Remaining %v of a lost ticket", tk.Remaining())
	}
	if err := tk.Extend(context.Background(), time.Minute); !errors.Is(err, ErrTicketLost) {
		t.Fatalf("Extend of a lost ticket: %v", err)
	}
	fc.silent(t, 100*time.Millisecond)
	if st := cl.Stats(); st.ExtendNotHeld != 1 || st.Extended != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestExtendUnsupportedIsDefinite(t *testing.T) {
	t.Run("E unsupported", func(t *testing.T) {
		_, clk, _, fc, tk := revisedTicket(t)
		start := clk.Now()
		clk.Advance(5 * time.Second)
		ch := extendAsync(tk, context.Background(), 10*time.Second)
		e := expectExtend(t, fc, tk, 10)
		deadlineIs(t, tk, start, 5*time.Second+span10)
		fc.send(t, errResp(e.Owner, wire.ReasonUnsupported))
		err := waitErr(t, ch, clustertest.Bound, "Extend")
		var se *ServerError
		if !errors.Is(err, ErrUnsupported) || !errors.As(err, &se) || errors.Is(err, ErrIndeterminate) {
			t.Fatalf("Extend: %v, want ErrUnsupported", err)
		}
		fc.silent(t, 200*time.Millisecond) // never retried
		deadlineIs(t, tk, start, span30)   // not applied: the deadline stands
	})
	t.Run("E unsupported after an attempt lost with its connection", func(t *testing.T) {
		_, clk, fs, fc, tk := revisedTicket(t)
		start := clk.Now()
		clk.Advance(5 * time.Second)
		ch := extendAsync(tk, context.Background(), 10*time.Second)
		expectExtend(t, fc, tk, 10)
		clk.Advance(time.Second)
		fc.nc.Close()
		fc2 := fs.next(t)
		e := expectExtend(t, fc2, tk, 10)
		fc2.send(t, errResp(e.Owner, wire.ReasonUnsupported))
		if err := waitErr(t, ch, clustertest.Bound, "Extend"); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Extend: %v, want ErrUnsupported", err)
		}
		deadlineIs(t, tk, start, 5*time.Second+span10) // the first attempt may have been applied
	})
	t.Run("a latch/1 server: at once, nothing sent", func(t *testing.T) {
		fs := newFakeServer(t)
		cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
		fc := fs.next(t)
		ch := acquireAsync(cl, context.Background(), "k", 0, AcquireOptions{})
		a := fc.expect(t, wire.OpAcquire)
		fc.send(t, granted(a.Owner, 3))
		r := wait(t, ch, clustertest.Bound)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.t.Extend(context.Background(), time.Minute); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "nothing was sent") {
			t.Fatalf("Extend: %v, want ErrUnsupported, nothing sent", err)
		}
		fc.silent(t, 100*time.Millisecond)
		if !r.t.CurrentDeadline().Equal(r.t.Deadline) {
			t.Fatal("the deadline moved")
		}
	})
	t.Run("queued, then only a latch/1 connection comes up", func(t *testing.T) {
		gate := make(chan struct{})
		fs := newFakeServer(t, withGate(gate))
		clk := newFakeClock()
		cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk})
		tk := cl.newTicket("k", 4, clk.Now().Add(time.Minute), 60)
		ch := extendAsync(tk, context.Background(), time.Minute)
		eventually(t, clustertest.Bound, "extend queued", func() bool { return cl.Stats().Queued == 1 })
		close(gate)
		if err := waitErr(t, ch, clustertest.Bound, "Extend"); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Extend: %v, want ErrUnsupported", err)
		}
		fs.next(t).silent(t, 100*time.Millisecond)
	})
}

// E unavailable is not applied: the extend is asked again (with a backoff, on the next
// connection, since that server retires) within its bound, with the same owner; the deadline
// counts from the attempt that was confirmed.
func TestExtendRetried(t *testing.T) {
	for _, how := range []string{"E unavailable", "E indeterminate", "connection lost"} {
		t.Run(how+", then L", func(t *testing.T) {
			_, clk, fs, fc, tk := revisedTicket(t)
			start := clk.Now()
			clk.Advance(5 * time.Second)
			ch := extendAsync(tk, context.Background(), time.Minute)
			e1 := expectExtend(t, fc, tk, 60)
			clk.Advance(time.Second) // the resend is written a second later
			next := fc
			switch how {
			case "E unavailable":
				fc.send(t, errResp(e1.Owner, wire.ReasonUnavailable))
				fc.closed(t, clustertest.Bound) // retired
				next = fs.next(t)
			case "E indeterminate":
				fc.send(t, errResp(e1.Owner, wire.ReasonIndeterminate)) // sent again on the same connection
			case "connection lost":
				fc.nc.Close()
				next = fs.next(t)
			}
			e2 := expectExtend(t, next, tk, 60)
			if e2.Owner != e1.Owner {
				t.Fatalf("resent with owner %d, want %d", e2.Owner, e1.Owner)
			}
			next.send(t, short(wire.OpExtend, e2.Owner))
			if err := waitErr(t, ch, clustertest.Bound, "Extend"); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			deadlineIs(t, tk, start, 6*time.Second+span60)
		})
	}
}

func TestExtendIndeterminate(t *testing.T) {
	for _, tc := range []struct {
		lease time.Duration
		want  time.Duration // the deadline after, from the start
	}{
		{time.Minute, span30},                      // the old deadline is the earlier
		{10 * time.Second, 5*time.Second + span10}, // the extend's own is the earlier
	} {
		t.Run(tc.lease.String(), func(t *testing.T) {
			_, clk, fs, fc, tk := revisedTicket(t)
			start := clk.Now()
			clk.Advance(5 * time.Second)
			ch := extendAsync(tk, context.Background(), tc.lease)
			expectExtend(t, fc, tk, uint16(tc.lease/time.Second))
			clk.Advance(IOTimeout - time.Nanosecond)
			select {
			case err := <-ch:
				t.Fatalf("Extend returned early: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			clk.Advance(time.Nanosecond)
			if err := waitErr(t, ch, clustertest.Bound, "Extend"); !errors.Is(err, ErrIndeterminate) {
				t.Fatalf("Extend: %v, want ErrIndeterminate", err)
			}
			fc.closed(t, clustertest.Bound) // no answer by its deadline: exactly that connection closed
			deadlineIs(t, tk, start, tc.want)
			fs.next(t).silent(t, 100*time.Millisecond) // not sent again after its bound
		})
	}
}

func TestExtendOneInFlight(t *testing.T) {
	_, _, _, fc, tk := revisedTicket(t)
	ch := extendAsync(tk, context.Background(), time.Minute)
	e := expectExtend(t, fc, tk, 60)
	if err := tk.Extend(context.Background(), time.Minute); !errors.Is(err, ErrExtendInProgress) {
		t.Fatalf("second Extend: %v, want ErrExtendInProgress", err)
	}
	fc.silent(t, 100*time.Millisecond)
	fc.send(t, short(wire.OpExtend, e.Owner))
	if err := waitErr(t, ch, clustertest.Bound, "Extend"); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	ch = extendAsync(tk, context.Background(), time.Minute) // one at a time: now it may
	e = expectExtend(t, fc, tk, 60)
	fc.send(t, short(wire.OpExtend, e.Owner))
	if err := waitErr(t, ch, clustertest.Bound, "Extend"); err != nil {
		t.Fatalf("third Extend: %v", err)
	}
}

func TestExtendNeverAfterTheDeadline(t *testing.T) {
	t.Run("called at the deadline", func(t *testing.T) {
		_, clk, _, fc, tk := revisedTicket(t)
		clk.Advance(tk.Remaining())
		err := tk.Extend(context.Background(), time.Minute)
		if !errors.Is(err, ErrTicketEnded) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Extend at the deadline: %v, want ErrTicketEnded", err)
		}
		fc.silent(t, 100*time.Millisecond)
	})
	t.Run("queued until the deadline", func(t *testing.T) {
		_, clk, fs, fc, tk := revisedTicket(t)
		clk.Advance(tk.Remaining() - 2*time.Second)
		fs.failHello.Store(1 << 20) // no new connection gets through
		fc.nc.Close()
		eventually(t, clustertest.Bound, "connection gone", func() bool { return tk.cl.Stats().ConnsOpen == 0 })
		ch := extendAsync(tk, context.Background(), time.Minute)
		eventually(t, clustertest.Bound, "extend queued", func() bool { return tk.cl.Stats().Queued == 1 })
		clk.Advance(2*time.Second - time.Nanosecond)
		select {
		case err := <-ch:
			t.Fatalf("Extend returned early: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		clk.Advance(time.Nanosecond)
		if err := waitErr(t, ch, clustertest.Bound, "Extend"); !errors.Is(err, ErrTimeout) || errors.Is(err, ErrIndeterminate) {
			t.Fatalf("Extend: %v, want ErrTimeout (never sent)", err)
		}
	})
	t.Run("no resend after the deadline", func(t *testing.T) {
		_, clk, fs, fc, tk := revisedTicket(t)
		clk.Advance(tk.Remaining() - 2*time.Second)
		ch := extendAsync(tk, context.Background(), time.Minute)
		expectExtend(t, fc, tk, 60)
		clk.Advance(2 * time.Second) // the deadline: its answer deadline too
		if err := waitErr(t, ch, clustertest.Bound, "Extend"); !errors.Is(err, ErrIndeterminate) {
			t.Fatalf("Extend: %v, want ErrIndeterminate", err)
		}
		fc.closed(t, clustertest.Bound)
		fs.next(t).silent(t, 100*time.Millisecond)
	})
	t.Run("an L read after the deadline does not revive the ticket", func(t *testing.T) {
		// The call's answer deadline is the ticket's, so such an L only races its timer;
		// extended decides it with the moment the L was read.
		cl, clk, _, fc, tk := revisedTicket(t)
		c := newCall(kindExtend, 1000, clk.Now().Add(time.Minute))
		c.key, c.token, c.lease, c.ext = tk.Key, tk.Token, 60, &extendCall{tk: tk, span: span60}
		c.writtenAt, c.seen = clk.Now(), tk.Deadline.Sub(clk.Now()) // read at the deadline
		tk.mu.Lock()
		tk.xLocked().ext = c
		tk.mu.Unlock()
		err := tk.extended(c, short(wire.OpExtend, 1000), nil)
		if !errors.Is(err, ErrTicketEnded) || !strings.Contains(err.Error(), "released in the background") {
			t.Fatalf("late L: %v, want ErrTicketEnded", err)
		}
		rel := fc.expect(t, wire.OpRelease) // the compensating release
		if rel.Token != tk.Token {
			t.Fatalf("compensation %+v", rel)
		}
		fc.send(t, short(wire.OpRelease, rel.Owner))
		eventually(t, clustertest.Bound, "compensated", func() bool { return cl.Stats().CompensationsSucceeded == 1 })
		ended(t, tk.Context(), context.DeadlineExceeded, ErrTicketEnded)
	})
}

func TestExtendGoesOutOnARevisedConnection(t *testing.T) {
	old, rev := newFakeServer(t), newFakeServer(t, withLeases())
	clk := newFakeClock()
	cl := newTestClient(t, Config{Servers: []string{old.addr, rev.addr}, Conns: 2, Clock: clk, PingInterval: time.Hour})
	fcOld, fcRev := old.next(t), rev.next(t)
	eventually(t, clustertest.Bound, "both connected", func() bool { st := cl.Stats(); return st.ConnsOpen == 2 && st.ConnsRevised == 1 })
	tk := cl.newTicket("k", 4, clk.Now().Add(time.Minute), 60)
	for range 5 {
		ch := extendAsync(tk, context.Background(), time.Minute)
		e := expectExtend(t, fcRev, tk, 60)
		fcRev.send(t, short(wire.OpExtend, e.Owner))
		if err := waitErr(t, ch, clustertest.Bound, "Extend"); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	fcOld.silent(t, 100*time.Millisecond)
}

// The ticket's own context may bound its extend (its Deadline method takes the ticket's lock).
func TestExtendUnderTheTicketsContext(t *testing.T) {
	_, clk, _, fc, tk := revisedTicket(t)
	start := clk.Now()
	ch := extendAsync(tk, tk.Context(), time.Minute)
	e := expectExtend(t, fc, tk, 60)
	fc.send(t, short(wire.OpExtend, e.Owner))
	if err := waitErr(t, ch, clustertest.Bound, "Extend"); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	deadlineIs(t, tk, start, span60)
}

func TestExtendInputAndCancel(t *testing.T) {
	_, clk, _, fc, tk := revisedTicket(t)
	for _, lease := range []time.Duration{-time.Nanosecond, 3600*time.Second + 1, 10 * time.Hour} {
		if err := tk.Extend(context.Background(), lease); !errors.Is(err, ErrUnsupportedDuration) {
			t.Fatalf("Extend(%v): %v, want ErrUnsupportedDuration", lease, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tk.Extend(ctx, time.Minute); !errors.Is(err, ErrCanceled) {
		t.Fatalf("Extend with a canceled context: %v", err)
	}
	fc.silent(t, 100*time.Millisecond)
	deadlineIs(t, tk, clk.Now(), span30)
	ch := extendAsync(tk, context.Background(), 3600*time.Second)
	e := expectExtend(t, fc, tk, 3600)
	fc.send(t, short(wire.OpExtend, e.Owner))
	if err := waitErr(t, ch, clustertest.Bound, "Extend"); err != nil {
		t.Fatalf("Extend of an hour: %v", err)
	}
}
