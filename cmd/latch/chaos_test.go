package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/clustertest"
)

// hold is one lock a worker was given: from when Acquire returned to when it began to
// release it, or its ticket's conservative deadline if that came first.
type hold struct {
	key        string
	token      uint64
	start, end time.Time
	worker     int
}

// TestClusterChaosKeepsMutualExclusion runs workers through the client library against all
// three nodes while the leader is killed, another node is frozen and resumed, and the killed
// node comes back. Every grant is recorded: no token may be granted twice, and per key the
// holds, ordered by token, must not overlap (under the leases the client promised).
func TestClusterChaosKeepsMutualExclusion(t *testing.T) {
	clustertest.Slow(t, "starts three processes and runs a fault schedule")
	tc := startTestCluster(t, 3)
	tc.leader()
	var servers []string
	for _, p := range tc.procs {
		servers = append(servers, p.listen)
	}

	const workers, keys = 12, 3
	var mu sync.Mutex
	var holds []hold
	outcomes := map[string]int{}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range workers {
		cl, err := client.New(client.Config{Servers: servers, Conns: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("chaos/%d", w%keys)
			for ctx.Err() == nil {
				tk, err := cl.Acquire(ctx, key, 0, client.AcquireOptions{Wait: 3 * time.Second, Lease: 4 * time.Second})
				got := time.Now()
				if err != nil {
					mu.Lock()
					outcomes["acquire "+errKind(err)]++
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					continue
				}
				time.Sleep(time.Duration(w%4) * 5 * time.Millisecond) // the critical section
				end := time.Now()
				if end.After(tk.Deadline) {
					end = tk.Deadline
				}
				rerr := tk.Release(context.Background())
				mu.Lock()
				holds = append(holds, hold{key: key, token: tk.Token, start: got, end: end, worker: w})
				outcomes["release "+errKind(rerr)]++
				mu.Unlock()
			}
		}()
	}

	pause := func(d time.Duration) { time.Sleep(d) }
	pause(2 * time.Second)
	l := tc.leader()
	tc.procs[l].cmd.Process.Signal(syscall.SIGKILL)
	<-tc.procs[l].exited
	pause(3 * time.Second)
	other := tc.leader(l)
	frozen := (other + 1) % 3
	if frozen == l {
		frozen = (frozen + 1) % 3
	}
	tc.procs[frozen].signal(t, syscall.SIGSTOP)
	pause(3 * time.Second)
	tc.procs[frozen].signal(t, syscall.SIGCONT)
	tc.procs[l] = startServer(t, nil, tc.args[l]...)
	pause(4 * time.Second)
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("holds %d, outcomes %v", len(holds), outcomes)
	if len(holds) < 50 {
		t.Fatalf("only %d holds: the cluster did not serve through the faults (outcomes %v)", len(holds), outcomes)
	}
	byToken := map[uint64]hold{}
	perKey := map[string][]hold{}
	for _, h := range holds {
		if prev, dup := byToken[h.token]; dup {
			t.Fatalf("token %d granted twice: %+v and %+v", h.token, prev, h)
		}
		byToken[h.token] = h
		perKey[h.key] = append(perKey[h.key], h)
	}
	for key, hs := range perKey {
		sort.Slice(hs, func(i, j int) bool { return hs[i].token < hs[j].token })
		for i := 1; i < len(hs); i++ {
			a, b := hs[i-1], hs[i]
			if b.start.Before(a.end) {
				t.Fatalf("%s: token %d (worker %d) held from %s while token %d (worker %d) was held until %s",
					key, b.token, b.worker, b.start.Format("15:04:05.000000"), a.token, a.worker, a.end.Format("15:04:05.000000"))
			}
		}
	}
}

// errKind names a client error for the outcome table.
func errKind(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{
		{nil, "ok"}, {client.ErrTimeout, "timeout"}, {client.ErrBusy, "busy"},
		{client.ErrIndeterminate, "indeterminate"}, {client.ErrUnavailable, "unavailable"},
		{client.ErrNotHeld, "not_held"}, {context.Canceled, "canceled"}, {client.ErrCanceled, "canceled"},
	} {
		if errors.Is(err, e.err) || (err == nil && e.err == nil) {
			return e.name
		}
	}
	return "other: " + strings.SplitN(err.Error(), ":", 2)[0]
}
