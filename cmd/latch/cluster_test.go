package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// testCluster is n latch processes in cluster mode on loopback.
type testCluster struct {
	t       *testing.T
	procs   []*proc
	raft    []string
	args    [][]string
	bins    []string // each node's binary: "" is this build (see startServerOf)
	dataDir string
}

func startTestCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	return startClusterWith(t, n, func(int) []string { return extra })
}

// startClusterWith is startTestCluster with flags of its own for each node i.
func startClusterWith(t *testing.T, n int, perNode func(i int) []string) *testCluster {
	t.Helper()
	return startClusterOf(t, make([]string, n), perNode)
}

// startClusterOf is startClusterWith for len(bins) nodes, node i running the binary bins[i]
// ("" is this build; startServerOf).
func startClusterOf(t *testing.T, bins []string, perNode func(i int) []string) *testCluster {
	t.Helper()
	return startClusterAt(t, t.TempDir(), bins, perNode)
}

// startClusterAt is startClusterOf with the nodes' data directories in dataDir (node i's is
// dataDir/n<i+1>, which may be there already: a mount point).
func startClusterAt(t *testing.T, dataDir string, bins []string, perNode func(i int) []string) *testCluster {
	t.Helper()
	n := len(bins)
	tc := &testCluster{t: t, raft: clustertest.FreePorts(t, n), bins: bins, dataDir: dataDir}
	var ic []string
	for i, a := range tc.raft {
		ic = append(ic, fmt.Sprintf("n%d=%s", i+1, a))
	}
	for i := range n {
		args := append([]string{"--mode", "cluster", "--id", fmt.Sprintf("n%d", i+1),
			"--data-dir", filepath.Join(tc.dataDir, fmt.Sprintf("n%d", i+1)),
			"--raft-addr", tc.raft[i], "--initial-cluster", strings.Join(ic, ",")}, perNode(i)...)
		tc.args = append(tc.args, args)
		tc.procs = append(tc.procs, spawnServerOf(t, bins[i], nil, args...)) // they wait for each other
	}
	for _, p := range tc.procs {
		p.awaitServing(t)
	}
	return tc
}

// startNode starts node i again, from the binary bin ("" is this build) with its flags, and
// waits until it serves; node i must not be running.
func (tc *testCluster) startNode(i int, bin string) {
	tc.t.Helper()
	tc.bins[i] = bin
	tc.procs[i] = startServerOf(tc.t, bin, nil, tc.args[i]...)
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
		if found >= 0 && tc.allReady(skip) {
			return found
		}
		time.Sleep(100 * time.Millisecond)
	}
	tc.t.Fatal("no leader within 30 s")
	return -1
}

// dialLeader waits for the leader as leader does (skip: nodes not to count) and returns it
// with a client session to it (dial).
func (tc *testCluster) dialLeader(t *testing.T, skip ...int) (int, *wiretest.Conn) {
	t.Helper()
	l := tc.leader(skip...)
	return l, tc.procs[l].dial(t)
}

// allReady reports whether every live node answers /readyz with 200 (a follower is ready
// once it forwards to the leader).
func (tc *testCluster) allReady(skip []int) bool {
	for i, p := range tc.procs {
		if p == nil || contains(skip, i) {
			continue
		}
		select {
		case <-p.exited:
			continue
		default:
		}
		if code, _ := httpGetQuiet(p.http + "/readyz"); code != 200 {
			return false
		}
	}
	return true
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestClusterSurvivesLeaderKill(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	tc := startTestCluster(t, 3)
	l, c := tc.dialLeader(t)
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

	tc.procs[l].kill(t)
	_, c2 := tc.dialLeader(t, l)
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
	clustertest.Slow(t, "starts three processes twice")
	tc := startTestCluster(t, 3, "--token-floor", "1000")
	_, c := tc.dialLeader(t)
	tok := c.Do(t, wiretest.Acquire(1, 0, 300, "survives/restart")).Token
	if tok != 1001 {
		t.Fatalf("first token %d, want 1001 (--token-floor 1000)", tok)
	}
	c.Close()
	for i, p := range tc.procs {
		p.stop(t, fmt.Sprintf("n%d", i+1))
	}
	for i := range tc.procs {
		tc.procs[i] = startServer(t, nil, tc.args[i]...)
	}
	_, c = tc.dialLeader(t)
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
	clustertest.Slow(t, "starts three processes")
	tc := startTestCluster(t, 3)
	l := tc.leader()
	var followers []*wiretest.Conn
	for i, p := range tc.procs {
		if i == l {
			continue
		}
		c := p.dial(t)
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

func (tc *testCluster) leading(i int) bool {
	_, body := httpGetQuiet(tc.procs[i].http + "/metrics")
	return strings.Contains(body, "\nlatch_leading 1\n")
}

// TestClusterFrozenLeaderGrantsNothingStale stops the leader (SIGSTOP) past the election
// timeout, lets the others elect a leader and move the lock on, then resumes the old one:
// it must not grant from its stale view, and every token stays above the new leader's.
func TestClusterFrozenLeaderGrantsNothingStale(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	tc := startTestCluster(t, 3)
	old, c := tc.dialLeader(t)
	t1 := c.Do(t, wiretest.Acquire(1, 0, 60, "frozen")).Token

	resume := tc.procs[old].freeze(t)
	_, n := tc.dialLeader(t, old)
	n.Raw(t, wiretest.Acquire(2, 0, 30, "frozen"))
	n.ExpectOp(t, wire.OpTimeout, 2) // the lock survived the failover
	n.Raw(t, wiretest.Release(3, t1, "frozen"))
	n.ExpectOp(t, wire.OpRelease, 3)
	t2 := n.Do(t, wiretest.Acquire(4, 0, 60, "frozen")).Token
	if t2 <= t1 {
		t.Fatalf("token %d on the new leader, not above %d", t2, t1)
	}

	resume()
	// The resumed node's client connection: whatever it answers must agree with the new
	// leader (the key is held by t2), never a grant from its stale view.
	c.Raw(t, wiretest.Acquire(5, 0, 30, "frozen"))
	switch r := c.Next(t); {
	case r.Op == wire.OpAcquire:
		t.Fatalf("the resumed old leader granted a held lock: %s", wiretest.Describe(r))
	case r.Op == wire.OpTimeout, r.Op == wire.OpError && (r.Reason == wire.ReasonUnavailable || r.Reason == wire.ReasonIndeterminate):
	default:
		t.Fatalf("unexpected answer %s", wiretest.Describe(r))
	}
	// It steps down and then forwards: a free key gets a token above t2.
	deadline := time.Now().Add(30 * time.Second)
	for tc.leading(old) {
		if time.Now().After(deadline) {
			t.Fatal("the old leader still leads 30 s after it was resumed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := uint64(10); ; i++ {
		c.Raw(t, wiretest.Acquire(i, 0, 30, "after/resume"))
		r := c.Next(t)
		if r.Op == wire.OpAcquire {
			if r.Token <= t2 {
				t.Fatalf("token %d after the resume, not above %d", r.Token, t2)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no grant through the resumed node: %s", wiretest.Describe(r))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterMembershipThroughTheCLI grows a three-node cluster to five with --join (through
// a follower's --http) and shrinks it with latch peers remove, serving throughout.
func TestClusterMembershipThroughTheCLI(t *testing.T) {
	clustertest.Slow(t, "starts five processes")
	sec := newTestSecrets(t)
	secret := sec.admin
	tc := startTestCluster(t, 3, sec.serverArgs()...)
	l := tc.leader()
	f := (l + 1) % 3
	extra := clustertest.FreePorts(t, 2)
	for i, addr := range extra {
		id := fmt.Sprintf("n%d", 4+i)
		p := startServer(t, nil, append([]string{"--mode", "cluster", "--id", id, "--data-dir", filepath.Join(tc.dataDir, id),
			"--raft-addr", addr, "--join", tc.procs[f].http}, sec.serverArgs()...)...)
		tc.procs = append(tc.procs, p)
	}
	members := func(via int) string {
		code, out := run(t, nil, "peers", "list", "--http", tc.procs[via].http)
		if code != 0 {
			return fmt.Sprintf("(peers list: exit %d) %s", code, out)
		}
		return out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s within 30 s; members:\n%s", what, members(l))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// suffrage is each member's suffrage, from the peers list table.
	suffrage := func() map[string]string {
		out := map[string]string{}
		for _, line := range strings.Split(members(l), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] != "ID" {
				out[f[0]+" "+f[1]] = f[2]
			}
		}
		return out
	}
	voters := func() int {
		n := 0
		for _, s := range suffrage() {
			if s == "voter" {
				n++
			}
		}
		return n
	}
	waitFor("five voters", func() bool { return voters() == 5 })
	// A node with no raft state that joins stays out of elections for 2 x the election
	// timeout + 1 s before raft starts: it may be a member whose disk (and vote) was lost.
	quiet, started := logTime(t, tc.procs[3], "no raft state: waiting before taking part in elections"), logTime(t, tc.procs[3], "entering follower state")
	if d := started.Sub(quiet); d < 3*time.Second {
		t.Errorf("n4 started raft %v after announcing its vote quarantine, want at least 3 s", d)
	}

	waitFor("n5 ready", func() bool { code, _ := httpGetQuiet(tc.procs[4].http + "/readyz"); return code == 200 })
	c := wiretest.Dial(t, tc.procs[4].listen) // a joined node serves (forwarding)
	c.Hello(t, []byte(clientSecretValue))
	if r := c.Do(t, wiretest.Acquire(1, 0, 30, "grown")); r.Op != wire.OpAcquire {
		t.Fatalf("no grant through a joined node: %s", wiretest.Describe(r))
	}

	// Unsigned changes are refused; signed ones go through any node to the leader.
	if code, out := run(t, nil, "peers", "remove", "--http", tc.procs[f].http, "--id", "n4"); code == 0 || !strings.Contains(out, "--admin-secret-file") {
		t.Fatalf("unsigned remove: exit %d, %q", code, out)
	}
	if code, out := run(t, nil, "peers", "remove", "--http", tc.procs[f].http, "--id", "n4", "--admin-secret-file", secret); code != 0 {
		t.Fatalf("peers remove: exit %d, %q", code, out)
	}
	waitFor("n4 removed", func() bool { return !strings.Contains(members(l), "n4") && voters() == 4 })
	if code, out := run(t, nil, "peers", "remove", "--http", tc.procs[l].http, "--id", "nope", "--admin-secret-file", secret); code == 0 || !strings.Contains(out, "404") {
		t.Fatalf("removing an unknown member: exit %d, %q", code, out)
	}
	c.Raw(t, wiretest.Acquire(2, 0, 30, "shrunk"))
	if r := c.Next(t); r.Op != wire.OpAcquire {
		t.Fatalf("after the removal: %s", wiretest.Describe(r))
	}
	code, out := run(t, nil, "status", "--http", tc.procs[4].http)
	if code != 0 || !strings.Contains(out, "role") || !strings.Contains(out, "last token") {
		t.Fatalf("latch status: exit %d, %q", code, out)
	}

	// latch peers add before the node runs: it is a nonvoter, so the quorum stays three of
	// four voters, until it runs and has caught up; then the same call makes it a voter.
	n6 := clustertest.FreePorts(t, 1)[0]
	_, addOut, addDone := start(t, nil, "peers", "add", "--http", tc.procs[f].http, "--id", "n6", "--raft-addr", n6, "--admin-secret-file", secret)
	waitFor("n6 listed as a nonvoter", func() bool { return suffrage()["n6 "+n6] == "nonvoter" })
	if v := voters(); v != 4 {
		t.Fatalf("%d voters while n6 does not run, want 4:\n%s", v, members(l))
	}
	c.Raw(t, wiretest.Acquire(3, 0, 30, "while-n6-is-added"))
	if r := c.Next(t); r.Op != wire.OpAcquire {
		t.Fatalf("while n6 is added: %s", wiretest.Describe(r))
	}
	select {
	case err := <-addDone:
		t.Fatalf("peers add returned before n6 ran (%v):\n%s", err, addOut.String())
	default:
	}
	tc.procs = append(tc.procs, startServer(t, nil, append([]string{"--mode", "cluster", "--id", "n6",
		"--data-dir", filepath.Join(tc.dataDir, "n6"), "--raft-addr", n6, "--join", tc.procs[f].http}, sec.serverArgs()...)...))
	if code := exitWithin(t, addDone, 40*time.Second, "peers add, once n6 started,", addOut); code != 0 || !strings.Contains(addOut.String(), "added n6") {
		t.Fatalf("peers add once n6 runs: exit %d\n%s", code, addOut.String())
	}
	if v := voters(); v != 5 || suffrage()["n6 "+n6] != "voter" {
		t.Fatalf("after peers add, want n6 among 5 voters:\n%s", members(l))
	}

	// Another node answers at the address: refused before anything changes.
	code, out = run(t, nil, "peers", "add", "--http", tc.procs[l].http, "--id", "n7", "--raft-addr", n6, "--admin-secret-file", secret)
	if code == 0 || !strings.Contains(out, "409") || !strings.Contains(out, `is "n6", not "n7"`) {
		t.Fatalf("adding n7 at n6's address: exit %d, %q", code, out)
	}
	if strings.Contains(members(l), "n7") {
		t.Fatalf("n7 was added:\n%s", members(l))
	}
	// n4, removed while its --join loop still ran, never added itself back.
	if strings.Contains(members(l), "n4") {
		t.Fatalf("the removed n4 is back:\n%s", members(l))
	}
	// A voter that never runs is left a nonvoter: the call changed the configuration without
	// doing what was asked, so it exits 76 (not 69, "nothing was applied") and says how to
	// undo it; peers remove does.
	dead := clustertest.DeadAddr(t)
	_, addOut, addDone = start(t, nil, "peers", "add", "--http", tc.procs[l].http, "--id", "n9", "--raft-addr", dead, "--admin-secret-file", secret)
	if code := exitWithin(t, addDone, 60*time.Second, "peers add of a node that never runs", addOut); code != exitIndeterminate ||
		!strings.Contains(addOut.String(), "nonvoter") || !strings.Contains(addOut.String(), "peers remove") {
		t.Fatalf("peers add of a node that never runs: exit %d, want %d:\n%s", code, exitIndeterminate, addOut.String())
	}
	if got := suffrage()["n9 "+dead]; got != "nonvoter" {
		t.Fatalf("n9 after the failed add: %q, want nonvoter:\n%s", got, members(l))
	}
	if code, out := run(t, nil, "peers", "remove", "--http", tc.procs[l].http, "--id", "n9", "--admin-secret-file", secret); code != 0 {
		t.Fatalf("peers remove n9: exit %d, %s", code, out)
	}
}

// TestFiveNodesTransferAndLoseTwo: a five-node cluster hands leadership over when its leader
// gets SIGTERM (it exits 0, a successor leads at once), then loses a second node to SIGKILL
// and still serves with three of five; tokens keep rising throughout.
func TestFiveNodesTransferAndLoseTwo(t *testing.T) {
	clustertest.Slow(t, "starts five processes")
	tc := startTestCluster(t, 5)
	l, c := tc.dialLeader(t)
	t1 := c.Do(t, wiretest.Acquire(1, 0, 120, "five/held")).Token
	c.Close()

	start := time.Now()
	tc.procs[l].stop(t, "the leader")
	if strings.Contains(tc.procs[l].stderr.String(), "leadership transfer before shutdown failed") {
		t.Fatalf("the leader did not hand leadership over:\n%s", tc.procs[l].stderr.String())
	}
	second := tc.leader(l)
	t.Logf("new leader n%d established %s after SIGTERM", second+1, time.Since(start).Round(time.Millisecond))

	tc.procs[second].kill(t)
	_, n := tc.dialLeader(t, l, second)
	n.Raw(t, wiretest.Acquire(2, 0, 30, "five/held"))
	n.ExpectOp(t, wire.OpTimeout, 2) // still held after two leader changes
	if t2 := n.Do(t, wiretest.Acquire(3, 0, 30, "five/new")).Token; t2 <= t1 {
		t.Fatalf("token %d with three of five nodes, not above %d", t2, t1)
	}
	n.Raw(t, wiretest.Release(4, t1, "five/held"))
	n.ExpectOp(t, wire.OpRelease, 4)
}
