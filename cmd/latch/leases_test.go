package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/clustertest"
)

// waiterKeepsItsLease has a holder take key with a 5 s lease on servers, then a waiter ask
// for a 10 s lease with a 30 s wait: the waiter is granted when the holder's lease ends, and,
// with revision 2's grant age, its ticket keeps the time it was queued, where latch/1 counts
// the lease from the write and leaves at most the lease less the whole wait. It then extends.
func waiterKeepsItsLease(t *testing.T, key string, holderAt, waiterAt []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := client.New(client.Config{Servers: holderAt})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := client.New(client.Config{Servers: waiterAt})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	if _, err := holder.Acquire(ctx, key, 0, client.AcquireOptions{Lease: 5 * time.Second}); err != nil {
		t.Fatalf("holder: %v", err)
	}
	start := time.Now()
	tk, err := waiter.Acquire(ctx, key, 0, client.AcquireOptions{Wait: 30 * time.Second, Lease: 10 * time.Second})
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	waited, left := time.Since(start), tk.Remaining()
	if waited < 3*time.Second {
		t.Fatalf("the waiter was granted after %v: the holder's 5 s lease had not ended", waited)
	}
	// latch/1 would leave at most 10 s - waited. The age gives back the time queued on the
	// server, which is the holder's lease left when the waiter's frame was read: 5 s less
	// two transits, which even a loaded machine keeps under 3 s. (Causal, not a speed bound.)
	if want := 10*time.Second - waited + 2*time.Second; left < want {
		t.Fatalf("after waiting %v the waiter's ticket has %v of its 10 s lease left, want at least %v", waited, left, want)
	}
	if st := waiter.Stats(); st.ConnsRevised == 0 {
		t.Fatalf("stats %+v: no connection carries revision 2", st)
	}
	if err := tk.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if r := tk.Remaining(); r <= 10*time.Second {
		t.Fatalf("after a 20 s extend the ticket has %v left", r)
	}
	if err := tk.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestWaiterKeepsItsLeaseSingleMode(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil, "--mode", "single")
	waiterKeepsItsLease(t, "lease/single", []string{p.listen}, []string{p.listen})
}

// awaitLeases waits until a fresh client of addr negotiates revision 2: the cluster's feature
// switch is committed and addr serves it.
func awaitLeases(t *testing.T, addr string) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cl, err := client.New(client.Config{Servers: []string{addr}, Conns: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = cl.Ping(ctx)
		cancel()
		revised := cl.Stats().ConnsRevised
		cl.Close()
		if err == nil && revised > 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s does not serve revision 2 within 60 s of the cluster's start (ping: %v)", addr, err)
		}
	}
}

// A holder that asks through a follower keeps its lock across a kill -9 of the leader by
// extending: attempts during the election may fail or be unknown, a resend is safe, and once
// a new leader leads an extend is confirmed; the lock outlives its first lease, and nobody
// else gets it meanwhile.
func TestExtendThroughAFollowerAcrossALeaderKill(t *testing.T) {
	clustertest.Slow(t, "starts three processes and kills the leader")
	tc := startTestCluster(t, 3)
	l := tc.leader()
	f := (l + 1) % 3
	awaitLeases(t, tc.procs[f].listen)
	cl, err := client.New(client.Config{Servers: []string{tc.procs[f].listen}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tk, err := cl.Acquire(ctx, "extend/failover", 0, client.AcquireOptions{Lease: 15 * time.Second})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	firstEnd := tk.CurrentDeadline()
	tc.procs[l].kill(t)
	confirmed := false
	var errs []error
	for end := time.Now().Add(45 * time.Second); !confirmed && time.Now().Before(end) && time.Now().Before(tk.CurrentDeadline()); time.Sleep(500 * time.Millisecond) {
		err := tk.Extend(ctx, time.Minute)
		switch {
		case err == nil:
			confirmed = true
		case errors.Is(err, client.ErrIndeterminate), errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrTimeout):
			errs = append(errs, err) // the election: send it again
		default:
			t.Fatalf("extend during the failover: %v (after %v)", err, errs)
		}
	}
	if !confirmed {
		t.Fatalf("no extend was confirmed before the ticket's deadline; attempts: %v", errs)
	}
	if !tk.CurrentDeadline().After(firstEnd) {
		t.Fatalf("deadline %v after a confirmed extend, not past the first lease's %v", tk.CurrentDeadline(), firstEnd)
	}
	// Past the first lease (and well inside the extended one), the lock is still held.
	time.Sleep(time.Until(firstEnd.Add(time.Second)))
	if time.Now().After(tk.CurrentDeadline()) {
		t.Fatalf("the extended lease (to %v) ended before the check", tk.CurrentDeadline())
	}
	other, err := client.New(client.Config{Servers: []string{tc.procs[f].listen}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Acquire(ctx, "extend/failover", 0, client.AcquireOptions{}); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("acquire by another past the first lease: %v, want ErrTimeout (the extended lock is held)", err)
	}
	if err := tk.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// A waiter queued at the leader when it steps down (SIGTERM: it answers its waiters E
// unavailable, never granted) is sent again by its client, within its wait, to the new
// leader, which restarts the holder's lease in full; when it is granted, its ticket still has
// its whole lease left: the new leader counts the age from its own read of the frame, and
// the client from that attempt's write. (After a kill -9 the waiter's outcome is unknown, and
// the client says so: ErrIndeterminate.)
func TestGrantAgeAcrossAFailover(t *testing.T) {
	clustertest.Slow(t, "starts three processes and kills the leader")
	tc := startTestCluster(t, 3)
	l := tc.leader()
	var others []string
	for i, p := range tc.procs {
		if i != l {
			others = append(others, p.listen)
		}
	}
	awaitLeases(t, tc.procs[l].listen)
	for _, a := range others {
		awaitLeases(t, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holder, err := client.New(client.Config{Servers: []string{tc.procs[l].listen}})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Acquire(ctx, "age/failover", 0, client.AcquireOptions{Lease: 3 * time.Second}); err != nil {
		t.Fatalf("holder: %v", err)
	}
	waiter, err := client.New(client.Config{Servers: append([]string{tc.procs[l].listen}, others...)})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	type result struct {
		tk  *client.Ticket
		err error
	}
	done := make(chan result, 1)
	go func() {
		tk, err := waiter.Acquire(ctx, "age/failover", 0, client.AcquireOptions{Wait: 60 * time.Second, Lease: 10 * time.Second})
		done <- result{tk, err}
	}()
	time.Sleep(time.Second) // the waiter is queued at the leader
	tc.procs[l].stop(t, "the leader")
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("waiter across the failover: %v", r.err)
		}
		if left := r.tk.Remaining(); left < 9*time.Second {
			t.Fatalf("the waiter granted after the failover has %v of its 10 s lease left, want at least 9 s", left)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the waiter was not answered within 90 s of the leader's stop")
	}
}

// latch server --hold-leases keeps the cluster's feature switch off while that node is a
// member: through several of the leader's probe rounds, no node switches revision 2 on and
// no client meets it.
func TestHoldLeasesKeepsTheSwitchOff(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	tc := startClusterWith(t, 3, func(i int) []string {
		if i == 2 {
			return []string{"--hold-leases"}
		}
		return nil
	})
	l := tc.leader()
	time.Sleep(10 * time.Second) // three probe rounds (every 3 s)
	for i := range tc.procs {
		if on, err := tc.leases(i); err != nil || on {
			t.Fatalf("node %d: revision 2 on %v (%v) while n3 holds it back", i+1, on, err)
		}
	}
	cl := newPlainClient(t, tc.procs[l].listen)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if st := cl.Stats(); st.ConnsRevised != 0 {
		t.Fatalf("stats %+v: a connection carries revision 2 while the switch is off", st)
	}
}
