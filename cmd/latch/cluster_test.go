package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// freePorts reserves n distinct loopback ports (listen, note, close). Another process could
// take one in between; the cluster tests then fail loudly at startup, never silently.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// testCluster is n latch processes in cluster mode on loopback.
type testCluster struct {
	t       *testing.T
	procs   []*proc
	raft    []string
	args    [][]string
	dataDir string
}

func startTestCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, raft: freePorts(t, n), dataDir: t.TempDir()}
	var ic []string
	for i, a := range tc.raft {
		ic = append(ic, fmt.Sprintf("n%d=%s", i+1, a))
	}
	for i := range n {
		args := append([]string{"--mode", "cluster", "--id", fmt.Sprintf("n%d", i+1),
			"--data-dir", filepath.Join(tc.dataDir, fmt.Sprintf("n%d", i+1)),
			"--raft-addr", tc.raft[i], "--initial-cluster", strings.Join(ic, ",")}, extra...)
		tc.args = append(tc.args, args)
		tc.procs = append(tc.procs, startServer(t, nil, args...))
	}
	return tc
}

// leader waits until exactly one live node leads and returns its index.
func (tc *testCluster) leader(skip ...int) int {
	tc.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		found := -1
		for i, p := range tc.procs {
			if p == nil || contains(skip, i) {
				continue
			}
			if _, body := httpGetQuiet(p.http + "/metrics"); strings.Contains(body, "\nlatch_leading 1\n") {
				found = i
			}
		}
		if found >= 0 {
			return found
		}
		time.Sleep(100 * time.Millisecond)
	}
	tc.t.Fatal("no leader within 30 s")
	return -1
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// httpGetQuiet is an HTTP GET that reports failure as status 0, for polling.
func httpGetQuiet(hostPath string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + hostPath)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func TestClusterSurvivesLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes; skipped with -short")
	}
	t.Parallel()
	tc := startTestCluster(t, 3)
	l := tc.leader()
	c := wiretest.Dial(t, tc.procs[l].listen)
	c.Hello(t, nil)
	held := c.Do(t, wiretest.Acquire(1, 0, 120, "held/across")).Token
	if held == 0 {
		t.Fatal("no grant on the leader")
	}
	// A stream of acquires and releases; record every token.
	seen := map[uint64]bool{held: true}
	last := held
	for i := range 200 {
		key := fmt.Sprintf("k%d", i%7)
		r := c.Do(t, wiretest.Acquire(uint64(10+2*i), 0, 30, key))
		if r.Op != wire.OpAcquire {
			t.Fatalf("acquire %d: %s", i, wiretest.Describe(r))
		}
		if seen[r.Token] || r.Token <= last {
			t.Fatalf("token %d after %d: granted twice or not increasing", r.Token, last)
		}
		seen[r.Token], last = true, r.Token
		if rr := c.Do(t, wiretest.Release(uint64(11+2*i), r.Token, key)); rr.Op != wire.OpRelease {
			t.Fatalf("release %d: %s", i, wiretest.Describe(rr))
		}
	}
	c.Close()

	tc.procs[l].cmd.Process.Signal(syscall.SIGKILL)
	<-tc.procs[l].exited
	nl := tc.leader(l)
	c2 := wiretest.Dial(t, tc.procs[nl].listen)
	c2.Hello(t, nil)
	r := c2.Do(t, wiretest.Acquire(1, 0, 30, "after/failover"))
	if r.Op != wire.OpAcquire || r.Token <= last || seen[r.Token] {
		t.Fatalf("first grant after failover: %s; last token before was %d", wiretest.Describe(r), last)
	}
	// The lock held across the failover is still held (its lease restarted in full).
	c2.Raw(t, wiretest.Acquire(2, 0, 30, "held/across"))
	c2.ExpectOp(t, wire.OpTimeout, 2)
	c2.Raw(t, wiretest.Release(3, held, "held/across"))
	c2.ExpectOp(t, wire.OpRelease, 3)
}

func TestClusterRestartKeepsLocksAndCounter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes twice; skipped with -short")
	}
	t.Parallel()
	tc := startTestCluster(t, 3, "--token-floor", "1000")
	l := tc.leader()
	c := wiretest.Dial(t, tc.procs[l].listen)
	c.Hello(t, nil)
	tok := c.Do(t, wiretest.Acquire(1, 0, 300, "survives/restart")).Token
	if tok != 1001 {
		t.Fatalf("first token %d, want 1001 (--token-floor 1000)", tok)
	}
	c.Close()
	for _, p := range tc.procs {
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM:\n%s", code, p.stderr.String())
		}
	}
	for i := range tc.procs {
		tc.procs[i] = startServer(t, nil, tc.args[i]...)
	}
	l = tc.leader()
	c = wiretest.Dial(t, tc.procs[l].listen)
	c.Hello(t, nil)
	c.Raw(t, wiretest.Acquire(2, 0, 30, "survives/restart"))
	c.ExpectOp(t, wire.OpTimeout, 2)
	if next := c.Do(t, wiretest.Acquire(3, 0, 30, "new")).Token; next <= tok {
		t.Fatalf("token %d after a full restart, not above %d", next, tok)
	}
	c.Raw(t, wiretest.Release(4, tok, "survives/restart"))
	c.ExpectOp(t, wire.OpRelease, 4)
	for _, d := range []string{"n1", "n2", "n3"} {
		if _, err := os.Stat(filepath.Join(tc.dataDir, d, "raft.db")); err != nil {
			t.Fatalf("no raft.db for %s: %v", d, err)
		}
	}
}

func TestClusterFollowersForward(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes; skipped with -short")
	}
	t.Parallel()
	tc := startTestCluster(t, 3)
	l := tc.leader()
	var followers []*wiretest.Conn
	for i, p := range tc.procs {
		if i == l {
			continue
		}
		c := wiretest.Dial(t, p.listen)
		c.Hello(t, nil)
		followers = append(followers, c)
	}
	a, b := followers[0], followers[1]
	tok := a.Do(t, wiretest.Acquire(7, 0, 30, "via/follower")).Token
	if tok == 0 {
		t.Fatal("no grant through a follower")
	}
	// The other follower's client queues on the leader behind it, FIFO, and is granted
	// when the first releases (both through followers, same owner values on purpose).
	b.Raw(t, wiretest.Acquire(7, 20, 30, "via/follower"))
	b.ExpectSilent(t, 300*time.Millisecond)
	a.Raw(t, wiretest.Release(8, tok, "via/follower"))
	a.ExpectOp(t, wire.OpRelease, 8)
	if got := b.ExpectGrant(t, 7); got <= tok {
		t.Fatalf("token %d after %d", got, tok)
	}
	a.Alive(t, 9) // pings are answered by the follower itself
}
