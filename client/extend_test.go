package client

// A ticket's life on a revised connection: its context and the causes it ends with, Extend
// and its outcomes, and the keep-alive. The fake server speaks revision 2; the fake clock
// makes every deadline exact.

import (
	"context"
	"errors"
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
	r := wait(t, ch, bound)
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
		doneWithin(t, c, bound, name+" not done")
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
		if err := waitErr(t, done, bound, "Release"); err != nil {
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
