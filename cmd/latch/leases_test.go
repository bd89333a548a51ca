package main

import (
	"context"
	"testing"
	"time"

	"github.com/latchd/latch/client"
)

// waiterKeepsItsLease has a holder take key with a 2 s lease on servers, then a waiter ask
// for a 10 s lease with a 30 s wait: the waiter is granted when the holder's lease ends, and,
// with revision 2's grant age, its ticket has its lease left (less the rho margin and one
// commit), not the lease less its time in the queue as latch/1 counts it. It then extends.
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
	if _, err := holder.Acquire(ctx, key, 0, client.AcquireOptions{Lease: 2 * time.Second}); err != nil {
		t.Fatalf("holder: %v", err)
	}
	start := time.Now()
	tk, err := waiter.Acquire(ctx, key, 0, client.AcquireOptions{Wait: 30 * time.Second, Lease: 10 * time.Second})
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	waited, left := time.Since(start), tk.Remaining()
	if waited < time.Second {
		t.Fatalf("the waiter was granted after %v: the holder's 2 s lease had not ended", waited)
	}
	// latch/1 would leave 10 s - waited; the age gives back the wait, less the margin of rho
	// (10 ms) and the grant's commit and transit, which a loaded machine may stretch.
	if want := 10*time.Second - 900*time.Millisecond; left < want {
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
