package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// TestCompensationResults follows the compensations of late grants through their outcome on
// the Compensation the acquire's error carries: pending until the release is answered,
// confirmed by R, failed without an answer in IOTimeout, and dropped with a full queue.
func TestCompensationResults(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeServer(t)
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, CompensationQueue: 1})
	fc := fs.next(t)
	lateGrant := func(key string, token uint64) *Compensation {
		t.Helper()
		ch := acquireAsync(cl, context.Background(), key, 0, AcquireOptions{Wait: time.Second})
		a := fc.expect(t, wire.OpAcquire)
		clk.Advance(1500 * time.Millisecond)
		fc.send(t, granted(a.Owner, token))
		r := wait(t, ch, clustertest.Bound)
		comp := CompensationOf(r.err)
		if !errors.Is(r.err, ErrIndeterminate) || comp == nil || comp.Key != key || comp.Token != token ||
			!strings.HasPrefix(comp.Reason, fmt.Sprintf("granted token %d arrived ", token)) {
			t.Fatalf("late grant: %v, compensation %+v; want ErrIndeterminate with the compensation of %s token %d", r.err, comp, key, token)
		}
		return comp
	}
	done := func() context.Context { // a context that has already ended: Wait reports what is settled now
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}

	c1 := lateGrant("c1", 21)
	rel := fc.expect(t, wire.OpRelease)
	if err := c1.Wait(done()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait before the answer: %v, want the context's error", err)
	}
	fc.send(t, short(wire.OpRelease, rel.Owner))
	if err := c1.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after R: %v, want nil (confirmed)", err)
	}

	c2 := lateGrant("c2", 22)
	if rel = fc.expect(t, wire.OpRelease); rel.Token != 22 { // not answered: in progress, the queue full
		t.Fatalf("compensation %+v", rel)
	}
	c3 := lateGrant("c3", 23)
	if err := c3.Wait(context.Background()); !errors.Is(err, ErrCompensationDropped) {
		t.Fatalf("Wait of a dropped compensation: %v, want ErrCompensationDropped", err)
	}
	clk.Advance(IOTimeout) // c2 gets no answer in its 5 s
	if err := c2.Wait(context.Background()); err == nil || errors.Is(err, ErrCompensationDropped) {
		t.Fatalf("Wait of an unanswered compensation: %v, want the release's error", err)
	}
	if st := cl.Stats(); st.CompensationsSucceeded != 1 || st.CompensationsFailed != 1 || st.CompensationsDropped != 1 {
		t.Fatalf("stats %+v: want 1 succeeded, 1 failed, 1 dropped", st)
	}
	if CompensationOf(ErrIndeterminate) != nil || CompensationOf(nil) != nil {
		t.Fatal("CompensationOf found a compensation in an error that started none")
	}
}
