package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// TestQueuedWaiterRidesThroughLeaderStepDown queues `latch acquire --wait 30s` (all three
// servers listed) behind a holder on the leader, then stops the leader with SIGTERM: it
// drains and answers its waiter E unavailable, and the client asks again until a new leader
// queues it. Once the holder releases through the new leader, the waiter is granted a token
// above the holder's.
func TestQueuedWaiterRidesThroughLeaderStepDown(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	const key = "stepdown/queued"
	tc := startTestCluster(t, 3)
	l, c := tc.dialLeader(t)
	held := c.Do(t, wiretest.Acquire(1, 0, 60, key))
	if held.Op != wire.OpAcquire {
		t.Fatalf("holder on the leader: %s", wiretest.Describe(held))
	}
	c.Close()

	var all []string
	for _, p := range tc.procs {
		all = append(all, p.listen)
	}
	_, out, done := start(t, nil, "acquire", "--servers="+strings.Join(all, ","), "--wait", "30s", "--lease", "60s", key)
	started := time.Now()
	awaitWaiters(t, tc.procs[l], done, out, "the old leader")

	tc.procs[l].stop(t, "the leader") // SIGTERM: it drains and steps down, then exits 0
	nl, n := tc.dialLeader(t, l)
	t.Logf("n%d leads %v after the acquire started", nl+1, time.Since(started).Round(time.Millisecond))
	awaitWaiters(t, tc.procs[nl], done, out, "the new leader") // asked again, queued again

	n.Raw(t, wiretest.Release(2, held.Token, key))
	n.ExpectOp(t, wire.OpRelease, 2)
	code := exitWithin(t, done, 40*time.Second, "acquire (its wait is 30 s)", out)
	tok, ok := strings.CutPrefix(out.String(), "token ")
	if code != 0 || !ok {
		t.Fatalf("queued acquire across the step down: exit %d after %v:\n%s", code, time.Since(started), out.String())
	}
	got, err := strconv.ParseUint(strings.Fields(tok)[0], 10, 64)
	if err != nil || got <= held.Token {
		t.Fatalf("waiter's token %q, want one above the holder's %d:\n%s", tok, held.Token, out.String())
	}
	t.Logf("granted token %d (holder %d) %v after the acquire started", got, held.Token, time.Since(started).Round(time.Millisecond))
}

// awaitWaiters waits up to 20 s until p's /metrics shows exactly one queued waiter; it fails
// the test if the acquire whose Wait result done delivers ends first.
func awaitWaiters(t *testing.T, p *proc, done <-chan error, out *clustertest.Buffer, what string) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("acquire ended (%v) before it was queued on %s:\n%s", err, what, out.String())
		default:
		}
		if _, body := httpGetQuiet(p.http + "/metrics"); strings.Contains(body, "\nlatch_waiters 1\n") {
			return
		}
	}
	t.Fatalf("no waiter queued on %s within 20 s:\n%s", what, out.String())
}
