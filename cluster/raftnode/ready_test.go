package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	oc "github.com/latchd/latch/cluster/outcome"
)

// A follower restarted behind a log the leader wrote while it was down is not ready before
// it has applied the leader's commit index of that moment, and is ready after.
func TestReadyRestartedFollowerCatchesUpFirst(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader()
	f := c.followers()[0]
	c.shutdown(f)
	for i := range 300 {
		grant(t, l.n, fmt.Sprintf("behind/%d", i))
	}
	commit, err := l.n.LeaderCommit()
	if err != nil {
		t.Fatal(err)
	}
	c.restart(f)
	var reasons []string
	eventually(t, "restarted follower ready", func() bool {
		err := f.n.Ready()
		if err == nil {
			return true
		}
		if len(reasons) == 0 || reasons[len(reasons)-1] != err.Error() {
			reasons = append(reasons, err.Error())
		}
		return false
	})
	if applied := f.n.raft.AppliedIndex(); applied < commit {
		t.Fatalf("ready with applied index %d below the leader's commit index %d when it restarted", applied, commit)
	}
	// Whether the first Ready already finds it caught up depends on when the leader's
	// replication reaches it (a Ready waits up to readyWait for the apply): the start's log
	// check can leave the leader's retry queued for it. TestReadyReasons holds the
	// catching-up answer itself; what must hold here is the index above.
	t.Logf("not ready before: %q", reasons)
}

// Each reason a follower gives, in one line: catching up (the leader is ahead), the leader
// cannot be asked, the leader does not answer in time; and ready when none holds.
func TestReadyReasons(t *testing.T) {
	var ahead atomic.Uint64
	var fail, stall atomic.Bool
	var c *tcluster
	c = newCluster(t, 3, func(cfg *Config) {
		cfg.LeaderCommit = func(ctx context.Context, id, addr string) (uint64, error) {
			if stall.Load() {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			if fail.Load() {
				return 0, errors.New("connection refused")
			}
			idx, err := c.askLeader(ctx, id, addr)
			return idx + ahead.Load(), err
		}
	})
	l := c.leader()
	f := c.followers()[0]
	eventually(t, "follower ready", func() bool { return f.n.Ready() == nil })
	if err := l.n.Ready(); err != nil {
		t.Fatalf("leader not ready: %v", err)
	}
	if _, err := f.n.LeaderCommit(); !errors.Is(err, oc.NotLeader) {
		t.Fatalf("LeaderCommit on a follower: %v", err)
	}

	ahead.Store(1000)
	wantReason(t, f.n, "catching up: applied ", " (leader "+l.id+")")
	ahead.Store(0)
	eventually(t, "ready again", func() bool { return f.n.Ready() == nil })

	fail.Store(true)
	wantReason(t, f.n, "asking the leader "+l.id, "connection refused")
	fail.Store(false)
	eventually(t, "ready again", func() bool { return f.n.Ready() == nil })

	// A leader that does not answer: the last answer serves for a few seconds, then Ready
	// says so; each call returns within its bound all along.
	stall.Store(true)
	wantReason(t, f.n, "asking the leader "+l.id, "for its commit index")
	start := time.Now()
	if err := f.n.Ready(); err == nil {
		t.Fatal("ready while the leader does not answer")
	}
	if d := time.Since(start); d > readyWait+clustertest.Bound { // it gave up, it did not hang on the stalled leader
		t.Fatalf("Ready took %v while the leader did not answer", d)
	}
	stall.Store(false)
}

// wantReason waits until Ready says why it is not, containing each of parts.
func wantReason(t *testing.T, n *Node, parts ...string) {
	t.Helper()
	var last error
	eventually(t, "not ready: "+strings.Join(parts, "..."), func() bool {
		last = n.Ready()
		if last == nil || strings.Contains(last.Error(), "\n") {
			return false
		}
		for _, p := range parts {
			if !strings.Contains(last.Error(), p) {
				return false
			}
		}
		return true
	})
}

// A removed follower is not ready and says it is not a member.
func TestReadyRemovedNodeIsNotAMember(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader()
	f := c.followers()[0]
	eventually(t, "follower ready", func() bool { return f.n.Ready() == nil })
	if err := l.n.RemoveServer(f.id); err != nil {
		t.Fatalf("remove: %v", err)
	}
	wantReason(t, f.n, "not a member of the current configuration", f.id)
}
