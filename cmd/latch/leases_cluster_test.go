package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/clustertest"
)

// Issue 21, item 2, in cluster mode: once the cluster has switched revision 2 on, a waiter
// keeps the time it was queued on the leader (the leader's grant age, relayed over the
// revised forward channel unchanged), through a follower and at the leader, and extends.
//
// The bound is causal, not one on speed: the waiter is seen queued on the leader (its
// latch_waiters), then the holder releases a second later, so its age is at least that
// second, and a ticket's lease left, read when Acquire returns, is at least the lease plus
// that second less the time the Acquire took (rho's margin aside). In latch/1 it would be
// the lease less the whole time the Acquire took. (waiterKeepsItsLease, leases_test.go, is
// the single-mode check, with a bound on the commit.)
func TestWaiterKeepsItsQueueTimeInACluster(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	tc := startTestCluster(t, 3)
	l, _ := tc.agreed(mixedRecovery)
	tc.awaitLeasesOn()
	f := (l + 1) % len(tc.procs)
	for _, c := range []struct {
		name           string
		holder, waiter int
	}{{"waiter at a follower", l, f}, {"waiter at the leader", f, l}} {
		t.Run(c.name, func(t *testing.T) {
			const lease, queued = 10 * time.Second, time.Second
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			key := "queue/" + strings.ReplaceAll(c.name, " ", "-")
			holder, waiter := newPlainClient(t, tc.procs[c.holder].listen), newPlainClient(t, tc.procs[c.waiter].listen)
			held, err := holder.Acquire(ctx, key, 0, client.AcquireOptions{Lease: time.Minute})
			if err != nil {
				t.Fatalf("holder: %v", err)
			}
			type result struct {
				tk     *client.Ticket
				left   time.Duration
				waited time.Duration
				err    error
			}
			done := make(chan result, 1)
			go func() {
				start := time.Now()
				tk, err := waiter.Acquire(ctx, key, 0, client.AcquireOptions{Wait: 30 * time.Second, Lease: lease})
				var left time.Duration
				if err == nil {
					left = tk.Remaining()
				}
				done <- result{tk, left, time.Since(start), err}
			}()
			clustertest.Eventually(t, 30*time.Second, "the waiter queued on the leader", func() bool {
				_, body := httpGetQuiet(tc.procs[l].http + "/metrics")
				return strings.Contains(body, "\nlatch_waiters 1\n")
			})
			time.Sleep(queued)
			if err := held.Release(ctx); err != nil {
				t.Fatalf("holder's release: %v", err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			// At least lease + queued - waited, each of lease and queued less rho's 0.1%.
			if want := lease + queued - queued/500 - lease/500 - r.waited; r.left < want || r.left > lease {
				t.Fatalf("the waiter waited %v, at least %v of it queued on the leader; its ticket has %v of its %v lease left, want %v to %v",
					r.waited, queued, r.left, lease, want, lease)
			}
			if st := waiter.Stats(); st.ConnsRevised == 0 {
				t.Fatalf("waiter stats %+v: no connection carries revision 2", st)
			}
			if err := r.tk.Extend(ctx, 20*time.Second); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			if err := r.tk.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
		})
	}
}

// newPlainClient is this build's client on the one server addr, without a secret.
func newPlainClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Servers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
