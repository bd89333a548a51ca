package client

// Releases against the fake server: explicit ones, and the compensating release of a grant
// the client will not hand out (past the deadline, below the work budget), which goes out in
// the background, within bounds, and even across Close.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// lateGrant has a one-connection client's acquire of "late" (wait 2 s) granted token 77
// after its deadline, within the reply grace: Acquire returns ErrIndeterminate and the grant
// is being released in the background.
func lateGrant(t *testing.T) (*Client, *fakeServer, *fakeConn, wire.Request) {
	t.Helper()
	clk := newFakeClock()
	fs := newFakeServer(t)
	cl := fakeClient(t, clk, fs.addr)
	ch := acquireAsync(cl, context.Background(), "late", 0, AcquireOptions{Wait: 2 * time.Second})
	fc := fs.next(t)
	a := fc.expect(t, wire.OpAcquire)
	if a.Wait != 2 {
		t.Fatalf("stamped wait %d, want 2", a.Wait)
	}
	clk.Advance(2500 * time.Millisecond) // past the deadline, within the reply grace
	pending(t, ch, 50*time.Millisecond)
	fc.send(t, granted(a.Owner, 77))
	r := wait(t, ch, clustertest.Bound)
	if !errors.Is(r.err, ErrIndeterminate) || r.t != nil {
		t.Fatalf("late grant: %v, want ErrIndeterminate", r.err)
	}
	return cl, fs, fc, a
}

func TestFakeLateGrantIsCompensated(t *testing.T) {
	cl, fs, fc, a := lateGrant(t)
	rel := fc.expect(t, wire.OpRelease) // on the same connection: it stayed open
	if rel.Token != 77 || string(rel.Key) != "late" || rel.Owner == a.Owner || rel.Owner == 0 {
		t.Fatalf("compensation %+v, want a release of token 77 with a new owner", rel)
	}
	fc.send(t, short(wire.OpRelease, rel.Owner))
	eventually(t, clustertest.Bound, "compensation counted", func() bool { return cl.Stats().CompensationsSucceeded == 1 })
	if st := cl.Stats(); st.CompensationsSent != 1 || st.Indeterminate != 1 || fs.accepted.Load() != 1 {
		t.Fatalf("stats %+v, accepted %d", st, fs.accepted.Load())
	}
}

func TestFakeDeliveryGateBudget(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeServer(t)
	cl := fakeClient(t, clk, fs.addr)
	fc := fs.next(t)
	start := clk.Now()
	o := AcquireOptions{Wait: 5 * time.Second, Lease: 30 * time.Second}

	// 28 s of lease left is enough for a budget of 28 s: a ticket, deadline written_at + lease.
	ch := acquireAsync(cl, context.Background(), "gate", 28*time.Second, o)
	a := fc.expect(t, wire.OpAcquire)
	clk.Advance(2 * time.Second)
	fc.send(t, granted(a.Owner, 5))
	r := wait(t, ch, clustertest.Bound)
	if r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	if want := start.Add(30 * time.Second); !r.t.Deadline.Equal(want) || r.t.Remaining() != 28*time.Second {
		t.Fatalf("deadline %v remaining %v, want %v and 28s", r.t.Deadline, r.t.Remaining(), want)
	}
	// Its context ends exactly at the deadline on the client's clock.
	ctx := r.t.Context()
	clk.Advance(28*time.Second - time.Nanosecond)
	select {
	case <-ctx.Done():
		t.Fatal("ticket context done before its deadline")
	case <-time.After(50 * time.Millisecond):
	}
	clk.Advance(time.Nanosecond)
	doneWithin(t, ctx, clustertest.Bound, "ticket context not done at its deadline")
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v", ctx.Err())
	}

	// One nanosecond less than the budget: not handed out, released in the background.
	ch = acquireAsync(cl, context.Background(), "gate2", 28*time.Second, o)
	a = fc.expect(t, wire.OpAcquire)
	clk.Advance(2*time.Second + time.Nanosecond)
	fc.send(t, granted(a.Owner, 6))
	r = wait(t, ch, clustertest.Bound)
	if !errors.Is(r.err, ErrIndeterminate) || !strings.Contains(r.err.Error(), "budget") {
		t.Fatalf("short grant: %v, want ErrIndeterminate", r.err)
	}
	rel := fc.expect(t, wire.OpRelease)
	if rel.Token != 6 || string(rel.Key) != "gate2" {
		t.Fatalf("compensation %+v", rel)
	}
	fc.send(t, short(wire.OpNotHeld, rel.Owner)) // N: already gone is fine too
	eventually(t, clustertest.Bound, "compensation counted", func() bool { return cl.Stats().CompensationsSucceeded == 1 })
}

func TestFakeCompensationQueueFull(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeServer(t)
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, CompensationQueue: 1})
	fc := fs.next(t)
	lateGrant := func(key string, token uint64) {
		t.Helper()
		ch := acquireAsync(cl, context.Background(), key, 0, AcquireOptions{Wait: time.Second})
		a := fc.expect(t, wire.OpAcquire)
		clk.Advance(1500 * time.Millisecond)
		fc.send(t, granted(a.Owner, token))
		if r := wait(t, ch, clustertest.Bound); !errors.Is(r.err, ErrIndeterminate) {
			t.Fatalf("late grant: %v", r.err)
		}
	}
	lateGrant("c1", 21)
	rel := fc.expect(t, wire.OpRelease) // not answered: the compensation stays in progress
	if rel.Token != 21 {
		t.Fatalf("compensation %+v", rel)
	}
	lateGrant("c2", 22)
	fc.silent(t, 100*time.Millisecond) // no release for 22: the queue was full
	st := cl.Stats()
	if st.CompensationsSent != 1 || st.CompensationsDropped != 1 {
		t.Fatalf("stats %+v: want 1 sent, 1 dropped", st)
	}
	clk.Advance(IOTimeout) // the first compensation gets no answer in its 5 s
	eventually(t, clustertest.Bound, "compensation failed", func() bool { return cl.Stats().CompensationsFailed == 1 })
}

// Close right after an acquire came back indeterminate (its grant is being released in the
// background) still sends that release and waits for its answer: the key is not left held
// for its lease because the caller closed the client at once.
func TestFakeCloseSendsAPendingCompensation(t *testing.T) {
	cl, _, fc, _ := lateGrant(t)
	closed := make(chan struct{})
	go func() { cl.Close(); close(closed) }()
	rel := fc.expect(t, wire.OpRelease)
	if rel.Token != 77 {
		t.Fatalf("compensation %+v", rel)
	}
	fc.send(t, short(wire.OpRelease, rel.Owner))
	select {
	case <-closed:
	case <-time.After(clustertest.Bound):
		t.Fatal("Close did not return after the compensation was answered")
	}
	if st := cl.Stats(); st.CompensationsSucceeded != 1 || st.CompensationsFailed != 0 {
		t.Fatalf("stats %+v: the compensation must have gone out and succeeded", st)
	}
}

func TestFakeRelease(t *testing.T) {
	t.Run("no answer is indeterminate after 5 s", func(t *testing.T) {
		clk := newFakeClock()
		fs := newFakeServer(t)
		cl := fakeClient(t, clk, fs.addr)
		fc := fs.next(t)
		done := releaseAsync(cl, context.Background(), "r", 4)
		r := fc.expect(t, wire.OpRelease)
		if r.Token != 4 || string(r.Key) != "r" {
			t.Fatalf("release %+v", r)
		}
		clk.Advance(IOTimeout - time.Nanosecond)
		select {
		case err := <-done:
			t.Fatalf("Release returned early: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		clk.Advance(time.Nanosecond)
		if err := waitErr(t, done, clustertest.Bound, "Release"); !errors.Is(err, ErrIndeterminate) {
			t.Fatalf("Release: %v, want ErrIndeterminate", err)
		}
		fc.closed(t, clustertest.Bound)
	})
	for _, answer := range []wire.Op{wire.OpRelease, wire.OpNotHeld} {
		t.Run("resent after a lost connection, answered "+answer.String(), func(t *testing.T) {
			fs := newFakeServer(t)
			cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
			fc := fs.next(t)
			done := releaseAsync(cl, context.Background(), "r", 4)
			r1 := fc.expect(t, wire.OpRelease)
			fc.nc.Close() // the answer is lost with the connection
			fc2 := fs.next(t)
			r2 := fc2.expect(t, wire.OpRelease)
			if r2.Owner != r1.Owner || r2.Token != 4 {
				t.Fatalf("resend %+v, want %+v", r2, r1)
			}
			fc2.send(t, short(answer, r2.Owner))
			err := waitErr(t, done, clustertest.Bound, "Release")
			if answer == wire.OpRelease && err != nil {
				t.Fatalf("Release: %v", err)
			}
			if answer == wire.OpNotHeld && (!errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "resend")) {
				t.Fatalf("Release: %v, want ErrNotHeld after a resend", err)
			}
		})
	}
}
