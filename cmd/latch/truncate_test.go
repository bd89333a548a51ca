package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// raftStatus is the part of /v1/status these tests read.
type raftStatus struct {
	Raft struct {
		Term         uint64 `json:"term"`
		CommitIndex  uint64 `json:"commit_index"`
		LastLogIndex uint64 `json:"last_log_index"`
	} `json:"raft"`
}

func (p *proc) raftStatus() (raftStatus, bool) {
	var s raftStatus
	code, body := httpGetQuiet(p.http + "/v1/status")
	return s, code == 200 && json.Unmarshal([]byte(body), &s) == nil
}

// await polls cond for up to d, failing the test with what if it never holds.
func await(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
// majority (its followers are stopped), loses leadership, and the new leader's log makes it
// clear that tail ("clearing log suffix"). It must then restart, after SIGTERM and after
// kill -9, rejoin and serve. raft-wal v0.4.0 sealed the truncated segment without its index
// block, so every later start panicked (hashicorp/raft-wal#31).
func TestDeposedLeaderWithAClearedTailRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes; skipped with -short")
	}
	t.Parallel()
	tc := startTestCluster(t, 3)
	old := tc.leader()
	var followers []int
	for i := range tc.procs {
		if i != old {
			followers = append(followers, i)
		}
	}
	grantThrough(t, tc.procs[old], "before")
	before, _ := tc.procs[old].raftStatus()

	// Followers stopped: the leader appends to its own log what it can never commit.
	for _, i := range followers {
		tc.procs[i].signal(t, syscall.SIGSTOP)
	}
	stopped := map[int]bool{followers[0]: true, followers[1]: true}
	defer func() {
		for i := range stopped {
			tc.procs[i].signal(t, syscall.SIGCONT)
		}
	}()
	c := wiretest.Dial(t, tc.procs[old].listen)
	c.Hello(t, nil)
	const proposals = 50
	for i := range proposals {
		c.Raw(t, wiretest.Acquire(uint64(i+1), 0, 30, fmt.Sprintf("lost/%d", i)))
	}
	await(t, "the old leader appends the proposals it cannot commit", 20*time.Second, func() bool {
		s, ok := tc.procs[old].raftStatus()
		return ok && s.Raft.LastLogIndex > before.Raft.CommitIndex
	})
	await(t, "the old leader steps down without a quorum", 30*time.Second, func() bool { return !tc.leading(old) })
	for range proposals {
		if r := c.Next(t); r.Op == wire.OpAcquire {
			t.Fatalf("a grant without a quorum: %s", wiretest.Describe(r))
		}
	}
	c.Close()
	tail, _ := tc.procs[old].raftStatus()

	// The old leader stopped, the others elect a leader and write past its tail.
	tc.procs[old].signal(t, syscall.SIGSTOP)
	stopped[old] = true
	for _, i := range followers {
		tc.procs[i].signal(t, syscall.SIGCONT)
		delete(stopped, i)
	}
	nl := tc.leader(old)
	for i := 0; ; i++ {
		grantThrough(t, tc.procs[nl], fmt.Sprintf("new/%d", i))
		if s, ok := tc.procs[nl].raftStatus(); ok && s.Raft.LastLogIndex > tail.Raft.LastLogIndex+2 {
			break
		}
		if i > 200 {
			t.Fatalf("the new leader's log never passed %d", tail.Raft.LastLogIndex)
		}
	}

	tc.procs[old].signal(t, syscall.SIGCONT)
	delete(stopped, old)
	await(t, "the old leader clears its uncommitted tail", 30*time.Second, func() bool {
		return strings.Contains(tc.procs[old].stderr.String(), `"clearing log suffix"`)
	})
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
