package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// A follower stopped while the leader writes a long log, then restarted, answers /readyz
// 503 with a one-line reason until it has applied the commit index the leader had, then
// 200. Removed with latch peers remove, it answers 503 "not a member".
//
// The leader is stopped while the follower restarts, so the follower is 503 for at least an
// election timeout, whatever it says (no leader known, then perhaps catching up); the test
// needs a one-line 503 before the first 200, and that first 200 only once the node's applied
// index has reached the commit index the old leader had.
func TestReadyzRestartedFollowerCatchesUp(t *testing.T) {
	clustertest.Slow(t, "starts four processes")
	fc := startFixedCluster(t, 3)
	l, f := fc.leaderAndFollower()
	fc.procs[f].stop(t, fmt.Sprintf("n%d", f))
	fc.procs[f] = nil

	// A long log: 3000 grants, pipelined in rounds of 500, while the follower is down.
	grantRounds(t, fc.conn(l), "behind", 6, 500)
	commit := metric(fc.http[l], "latch_raft_commit_index")
	if commit < 3000/256 {
		t.Fatalf("leader commit index %d after 3000 grants", commit)
	}

	// The leader is stopped while the follower comes back: it cannot be ready before the
	// others have elected a leader (at least an election timeout), so its 503s are there to
	// see however fast it would catch up; then it catches up from the new leader.
	resume := fc.procs[l].freeze(t)
	fc.procs[f] = spawnServer(t, nil, fc.args(f)...)
	var notReady []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("n%d not ready within 60 s; said %q", f, notReady)
		}
		code, body := httpGetQuiet(fc.http[f] + "/readyz")
		if code == 200 {
			break
		}
		if code == 503 {
			if strings.Count(body, "\n") != 1 || !strings.HasPrefix(body, "not ready: ") {
				t.Fatalf("/readyz 503 body is not one line with a reason: %q", body)
			}
			if r := strings.TrimSpace(body); len(notReady) == 0 || notReady[len(notReady)-1] != r {
				notReady = append(notReady, strings.TrimSpace(body))
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if applied := metric(fc.http[f], "latch_raft_applied_index"); applied < commit {
		t.Fatalf("n%d ready with applied index %d, below the leader's commit index %d", f, applied, commit)
	}
	if len(notReady) == 0 {
		t.Fatalf("n%d was never 503 after its restart", f)
	}
	t.Logf("n%d before it was ready: %q", f, notReady)
	for _, r := range notReady {
		if strings.Contains(r, "catching up") && !regexp.MustCompile(`catching up: applied \d+ of \d+ \(leader n\d\)`).MatchString(r) {
			t.Errorf("catching-up reason without its figures: %q", r)
		}
	}

	resume()
	fc.waitFor("the old leader is ready again", func() bool {
		code, _ := httpGetQuiet(fc.http[l] + "/readyz")
		return code == 200
	})
	if code, out := fc.admin(l, "peers remove", "--id", fmt.Sprintf("n%d", f)); code != 0 {
		t.Fatalf("peers remove: exit %d, %q", code, out)
	}
	fc.waitFor("removed node says it is not a member", func() bool {
		code, body := httpGetQuiet(fc.http[f] + "/readyz")
		return code == 503 && strings.Contains(body, "not a member")
	})
	if code, _ := httpGetQuiet(fc.http[l] + "/readyz"); code != 200 {
		t.Fatalf("n%d /readyz after the removal: %d", l, code)
	}
}

// A follower restarted on an empty data dir next to 100,000 held keys answers /readyz 200
// only once its own lock table holds every one of them: readiness counts what the table
// applied, not what raft handed to it (one entry carries up to 256 grants, and raft's queue
// to the table holds many entries).
func TestReadyzWipedFollowerHoldsEveryKey(t *testing.T) {
	clustertest.Slow(t, "starts four processes and takes 100,000 locks")
	keys := 100_000
	if v := os.Getenv("LATCH_READY_KEYS"); v != "" { // a larger table by hand, e.g. 1000000
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 || n%1000 != 0 {
			t.Fatalf("LATCH_READY_KEYS=%q: a whole number of thousands", v)
		}
		keys = n
	}
	fc := startFixedCluster(t, 3)
	l, f := fc.leaderAndFollower()
	grantRounds(t, fc.conn(l), "held", keys/1000, 1000)

	fc.procs[f].stop(t, fmt.Sprintf("n%d", f))
	if err := os.RemoveAll(fc.dataDir(f)); err != nil {
		t.Fatal(err)
	}
	fc.procs[f] = spawnServer(t, nil, fc.args(f)...)
	bound := 120*time.Second + time.Duration(keys/1000)*100*time.Millisecond
	deadline := time.Now().Add(bound)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the wiped n%d not ready within %v", f, bound)
		}
		if code, _ := httpGetQuiet(fc.http[f] + "/readyz"); code == 200 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, body := httpGetQuiet(fc.http[f] + "/v1/status")
	var st struct {
		Node struct {
			Keys int `json:"keys"`
		} `json:"node"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("status: %v: %s", err, body)
	}
	if st.Node.Keys < keys {
		t.Fatalf("the wiped n%d was ready holding %d of the %d keys", f, st.Node.Keys, keys)
	}
}

// grantRounds takes rounds*per fresh keys (prefix/round/i, an hour's lease) on c, pipelined a
// round at a time, and closes c.
func grantRounds(t *testing.T, c *wiretest.Conn, prefix string, rounds, per int) {
	t.Helper()
	defer c.Close()
	for round := range rounds {
		var frames [][]byte
		for i := range per {
			frames = append(frames, wiretest.Acquire(uint64(1+i), 0, 3600, fmt.Sprintf("%s/%d/%d", prefix, round, i)))
		}
		c.Send(t, frames...)
		for range frames {
			if r := c.Next(t); r.Op != wire.OpAcquire {
				t.Fatalf("acquire: %s", wiretest.Describe(r))
			}
		}
	}
}
