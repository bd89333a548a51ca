package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// logProgress is the part of /v1/status the truncation test reads.
type logProgress struct {
	Raft struct {
		Term         uint64 `json:"term"`
		CommitIndex  uint64 `json:"commit_index"`
		LastLogIndex uint64 `json:"last_log_index"`
	} `json:"raft"`
}

func (p *proc) logProgress() (logProgress, bool) {
	var s logProgress
	code, body := httpGetQuiet(p.http + "/v1/status")
	return s, code == 200 && json.Unmarshal([]byte(body), &s) == nil
}

// grantThrough acquires and releases key through p, retrying while the cluster settles,
// and returns the token.
func grantThrough(t *testing.T, p *proc, key string) uint64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for owner := uint64(1); ; owner++ {
		c, err := wiretest.DialErr(p.listen)
		if err == nil {
			c.Hello(t, nil)
			c.Raw(t, wiretest.Acquire(owner, 0, 30, key))
			r, err := c.TryNext(10 * time.Second)
			if err == nil && r.Op == wire.OpAcquire {
				c.Raw(t, wiretest.Release(owner, r.Token, key))
				c.ExpectOp(t, wire.OpRelease, owner)
				c.Close()
				return r.Token
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no grant of %q through %s within 30 s: %v", key, p.listen, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDeposedLeaderWithAClearedTailRestarts: a leader appends proposals that never reach a
// majority (its followers are down), loses leadership, and the new leader's log makes it
// clear that tail ("clearing log suffix"). It must then restart, after SIGTERM and after
// kill -9, rejoin and serve. raft-wal v0.4.0 sealed the truncated segment without its index
// block, so every later start panicked (hashicorp/raft-wal#31).
func TestDeposedLeaderWithAClearedTailRestarts(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	tc := startTestCluster(t, 3)
	old := tc.leader()
	var followers []int
	for i := range tc.procs {
		if i != old {
			followers = append(followers, i)
		}
	}
	grantThrough(t, tc.procs[old], "before")
	before, _ := tc.procs[old].logProgress()

	// Followers killed (not stopped: a stopped process's socket buffers would still take the
	// leader's AppendEntries and apply them on resume): the leader appends to its own log
	// what it can never commit.
	for _, i := range followers {
		tc.procs[i].kill(t)
	}
	c := tc.procs[old].dial(t)
	const proposals = 50
	for i := range proposals {
		c.Raw(t, wiretest.Acquire(uint64(i+1), 0, 30, fmt.Sprintf("lost/%d", i)))
	}
	clustertest.Eventually(t, 20*time.Second, "the old leader appends the proposals it cannot commit", func() bool {
		s, ok := tc.procs[old].logProgress()
		return ok && s.Raft.LastLogIndex > before.Raft.CommitIndex
	})
	clustertest.Eventually(t, 30*time.Second, "the old leader steps down without a quorum", func() bool { return !tc.leading(old) })
	for range proposals {
		if r := c.Next(t); r.Op == wire.OpAcquire {
			t.Fatalf("a grant without a quorum: %s", wiretest.Describe(r))
		}
	}
	c.Close()
	tail, _ := tc.procs[old].logProgress()

	// The old leader stopped, the others restart, elect a leader and write past its tail.
	resume := tc.procs[old].freeze(t)
	for _, i := range followers {
		tc.procs[i] = spawnServer(t, nil, tc.args[i]...)
	}
	for _, i := range followers {
		tc.procs[i].awaitServing(t)
	}
	nl := tc.leader(old)
	for i := 0; ; i++ {
		grantThrough(t, tc.procs[nl], fmt.Sprintf("new/%d", i))
		if s, ok := tc.procs[nl].logProgress(); ok && s.Raft.LastLogIndex > tail.Raft.LastLogIndex+2 {
			break
		}
		if i > 200 {
			t.Fatalf("the new leader's log never passed %d", tail.Raft.LastLogIndex)
		}
	}

	resume()
	// The new leader backs off (up to about 40 s) from a peer its replication failed to reach
	// while it was stopped, so the tail may be cleared only that long after the resume.
	resumed := time.Now()
	clustertest.Eventually(t, 90*time.Second, "the old leader clears its uncommitted tail", func() bool {
		return strings.Contains(tc.procs[old].stderr.String(), `"clearing log suffix"`)
	})
	t.Logf("the tail was cleared %v after the resume", time.Since(resumed).Round(time.Millisecond))
	grantThrough(t, tc.procs[old], "after/clear")

	for _, stop := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		tc.procs[old].signal(t, stop)
		code := tc.procs[old].wait(t, 30*time.Second)
		if stop == syscall.SIGTERM && code != 0 {
			t.Fatalf("exit %d after SIGTERM", code)
		}
		tc.procs[old] = spawnServer(t, nil, tc.args[old]...)
		tc.procs[old].awaitServing(t)
		tc.leader()
		tok := grantThrough(t, tc.procs[old], fmt.Sprintf("after/%v", stop))
		if strings.Contains(tc.procs[old].stderr.String(), "panic") {
			t.Fatalf("the restarted node panicked:\n%s", tc.procs[old].stderr.String())
		}
		t.Logf("restarted after %v and granted token %d through it", stop, tok)
	}
}
