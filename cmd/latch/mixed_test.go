package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/clustertest/history"
)

// Clusters of two builds: this one and the previous (prevLatch, prevbuild_test.go), as real
// processes on loopback, under the chaos lab's contended workload (chaos_workload_test.go)
// with every operation recorded and the history checked by package clustertest/history.
// The project's rule: a change to the log format or the wire is tested against the previous
// build (mixed versions, rolling upgrade) before it lands.

// mixedRecovery bounds, after a node restarted, the wait for the next grant (history's
// recovery check) and for the node to catch up with the leader. Generous: a restart under
// -race on a busy two-core machine.
const mixedRecovery = 10 * time.Second

// startMixedCluster starts a three-node cluster, node i from bins[i] ("" this build), each
// with the three secrets, the audit trail on (mixedaudit_test.go) and fixed client and HTTP
// ports (a restarted node keeps its addresses, so the workload's clients find it again). It returns the cluster, its secrets
// and the client addresses.
func startMixedCluster(t *testing.T, bins []string) (*testCluster, testSecrets, []string) {
	t.Helper()
	sec := newTestSecrets(t)
	n := len(bins)
	ports := clustertest.FreePorts(t, 2*n)
	tc := startClusterOf(t, bins, func(i int) []string {
		return append([]string{"--listen", ports[i], "--http", ports[n+i], "--audit"}, sec.serverArgs()...)
	})
	return tc, sec, ports[:n]
}

// version is the version p's "latch serving" line states: which build runs.
func (p *proc) version() string {
	v, _ := p.served["version"].(string)
	return v
}

// expectVersions fails the test unless node i states want[i], for every node.
func (tc *testCluster) expectVersions(want ...string) {
	tc.t.Helper()
	for i, p := range tc.procs {
		if got := p.version(); got != want[i] {
			tc.t.Fatalf("n%d runs version %q, want %q", i+1, got, want[i])
		}
	}
}

// status asks node i for /v1/status.
func (tc *testCluster) status(i int) (partitionStatus, error) {
	var st partitionStatus
	code, body := httpGetQuiet(tc.procs[i].http + "/v1/status")
	if code != 200 {
		return st, fmt.Errorf("n%d /v1/status: HTTP %d %.200s", i+1, code, body)
	}
	return st, json.Unmarshal([]byte(body), &st)
}

// statuses asks every node for its status; a node that does not answer is nil.
func (tc *testCluster) statuses() []*partitionStatus {
	sts := make([]*partitionStatus, len(tc.procs))
	for i := range tc.procs {
		if st, err := tc.status(i); err == nil {
			sts[i] = &st
		}
	}
	return sts
}

// agreed waits up to d until every node answers, one leads and all name it, and every node
// is ready; it returns the leader's index and the statuses, or fails the test.
func (tc *testCluster) agreed(d time.Duration) (int, []*partitionStatus) {
	tc.t.Helper()
	var sts []*partitionStatus
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		sts = tc.statuses()
		if l := agreedLeader(sts); l >= 0 && answered(sts) && tc.allReady(nil) {
			return l, sts
		}
	}
	tc.t.Fatalf("no leader every node names, all ready, within %s:\n%s", d, showStatuses(sts))
	return -1, nil
}

// converged waits up to d until every node has applied what the leader committed and all
// report the same last token: every node took in the log whichever build wrote it.
func (tc *testCluster) converged(d time.Duration) []*partitionStatus {
	tc.t.Helper()
	var sts []*partitionStatus
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		sts = tc.statuses()
		l := agreedLeader(sts)
		same := l >= 0 && answered(sts)
		for _, st := range sts {
			same = same && st.Raft.AppliedIndex >= sts[l].Raft.CommitIndex && st.Raft.LastToken == sts[l].Raft.LastToken
		}
		if same && tc.allReady(nil) {
			return sts
		}
	}
	tc.t.Fatalf("the nodes did not converge (applied index, last token) within %s:\n%s", d, showStatuses(sts))
	return nil
}

// answered reports whether every node answered its status.
func answered(sts []*partitionStatus) bool {
	for _, st := range sts {
		if st == nil {
			return false
		}
	}
	return true
}

func showStatuses(sts []*partitionStatus) string {
	var b strings.Builder
	for i, st := range sts {
		if st == nil {
			fmt.Fprintf(&b, "  n%d: no answer\n", i+1)
			continue
		}
		fmt.Fprintf(&b, "  %s\n", st)
	}
	return b.String()
}

// lead makes node i the leader: while another node leads, that one is restarted with its own
// binary (its SIGTERM hands leadership to the most caught-up voter, the first in the
// configuration on a tie), six times at most.
func (tc *testCluster) lead(i int) {
	tc.t.Helper()
	for try := 0; ; try++ {
		l := tc.leader()
		if l == i {
			return
		}
		if try == 6 {
			tc.t.Fatalf("n%d still leads after six restarts of the leader; want n%d", l+1, i+1)
		}
		tc.t.Logf("n%d leads; restarting it to hand leadership on", l+1)
		tc.procs[l].stop(tc.t, fmt.Sprintf("n%d, the leader", l+1))
		tc.startNode(l, tc.bins[l])
	}
}

// rollOrder is the followers of the current leader, then the leader: the order of a rolling
// restart that costs one election.
func (tc *testCluster) rollOrder() []int {
	tc.t.Helper()
	l := tc.leader()
	var order []int
	for i := range tc.procs {
		if i != l {
			order = append(order, i)
		}
	}
	return append(order, l)
}

// mixedLoad is the chaos workload on a test cluster, recorded.
type mixedLoad struct {
	t    *testing.T
	rec  *history.Recorder
	work *chaosWorkload
}

// startMixedLoad starts six contending workers on four keys (2-3 s leases, 2 s waits) and
// the probe (a fresh key every 50 ms), worker i through the servers serversOf(i).
func startMixedLoad(t *testing.T, sec testSecrets, serversOf func(int) []string) *mixedLoad {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("workload seed %d", seed)
	spec := chaosSpec{Secret: sec.client, Seed: seed, Workers: 6, Keys: 4,
		Lease: 2 * time.Second, Wait: 2 * time.Second, ProbeEvery: 50 * time.Millisecond}
	rec := history.NewRecorder(seed, 3)
	log := hclog.New(&hclog.LoggerOptions{Name: "workload", Output: testWriter{t}, Level: hclog.Warn})
	m := &mixedLoad{t: t, rec: rec, work: startChaosWorkload(spec, serversOf, rec, log)}
	t.Cleanup(m.work.stop)
	return m
}

// testWriter writes to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// restart stops node i of tc (SIGTERM, exit 0) and starts it from bin ("" this build) on
// the same data dir, waits until it has caught up with the leader, and records the restart
// as a fault and a node start.
func (m *mixedLoad) restart(tc *testCluster, i int, bin, to string) {
	m.t.Helper()
	id := fmt.Sprintf("n%d", i+1)
	f := history.Fault{Kind: "restart", Nodes: []string{id}, Start: m.rec.Now(), Detail: "to " + to}
	tc.procs[i].stop(m.t, id)
	at := m.rec.Now()
	tc.startNode(i, bin) // fails the test if it exits or does not serve
	f.Heal = m.rec.Now()
	m.rec.AddStart(history.NodeStart{Node: id, At: at, Took: f.Heal - at, OK: true})
	tc.rejoined(i, mixedRecovery)
	f.Leader = m.rec.Now()
	m.rec.AddFault(f)
}

// rejoined waits up to d until node i names the leader every node names and has applied
// what that leader had committed when first seen.
func (tc *testCluster) rejoined(i int, d time.Duration) {
	tc.t.Helper()
	l, sts := tc.agreed(d)
	commit := sts[l].Raft.CommitIndex
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if st, err := tc.status(i); err == nil && st.Raft.LeaderID == sts[l].Raft.ID && st.Raft.AppliedIndex >= commit {
			return
		}
	}
	tc.t.Fatalf("n%d did not catch up with leader %s (commit %d) within %s", i+1, sts[l].Raft.ID, commit, d)
}

// finish stops the workload and checks its history: history.Check's properties (no two
// holders at once, no token twice, tokens in real-time order, no early N, a grant within
// mixedRecovery of every restart), and every operation answered definitely unless it ran
// while a node restarted (checkAnswers). It returns the history.
func (m *mixedLoad) finish() history.History {
	m.t.Helper()
	m.work.stop()
	h := m.rec.History()
	sum := history.Summarize(h, mixedRecovery)
	m.t.Logf("summary:\n%s", sum)
	vs := history.Check(h, history.Options{RecoveryBound: mixedRecovery})
	for i, v := range vs {
		if i < 10 {
			m.t.Errorf("violation %s", v)
		}
	}
	if len(vs) > 0 {
		m.t.Errorf("%d violations in all", len(vs))
	}
	bad, ridden := checkAnswers(h)
	for i, b := range bad {
		if i < 10 {
			m.t.Errorf("%s", b)
		}
	}
	for i, r := range ridden {
		if i < 20 {
			m.t.Logf("ride-through: %s", r)
		}
	}
	if sum.Ops["acquire ok"] < 50 || sum.HoldsReleased == 0 || sum.HoldsExpired == 0 {
		m.t.Errorf("%d grants, holds released %d, expired %d: the workload did not run as it must", sum.Ops["acquire ok"], sum.HoldsReleased, sum.HoldsExpired)
	}
	if m.t.Failed() {
		keepHistory(m.t, h)
	}
	return h
}

// lateGrant is chaosResult's cause for a grant that came in the reply grace after the
// acquire's wait: the client's delivery gate refuses it and releases it in the background
// (package client, "Delivery gate"). The contended workload meets it without any fault: a
// holder's lease that ends just as a waiter's wait does.
const lateGrant = "grant arrived after the deadline (released in the background)"

// checkAnswers returns, for each operation, what is wrong with its answer. Definite answers
// are always fine: a grant or a timeout (contended) for an acquire, R or N for a release,
// unsupported for an extend (nothing was extended: a member does not serve revision 2); so
// is a late grant the client released itself (lateGrant). While a node restarts, the
// client's documented ride-through may also end an operation indeterminate (a connection to
// the stopping node lost after the request was written, an answer past its deadline) or
// unavailable (no server took it during its whole wait): that is allowed for operations
// that overlap a restart, from its SIGTERM until a second after the node caught up.
// Anything else (busy, other, or those outside a restart) is not. Most indeterminate ones
// are acquires a stopping follower had forwarded, waiting on the leader: the follower closes
// their connections unanswered (both builds), where a stopping leader answers its own
// waiters E unavailable.
//
// It returns those that are wrong, and those the ride-through allowed, each with the restart.
func checkAnswers(h history.History) (bad, ridden []string) {
	for _, op := range h.Ops {
		switch {
		case op.Result == history.OK, op.Result == history.NotHeld && op.Kind == history.Release,
			op.Result == history.Timeout && op.Kind == history.Acquire,
			op.Result == history.Unsupported && op.Kind == history.Extend,
			op.Result == history.Indeterminate && op.Kind == history.Acquire && op.Why == lateGrant:
		case op.Result == history.Indeterminate || op.Result == history.Unavailable || op.Result == history.Timeout:
			if f, ok := restartOf(h, op); ok {
				ridden = append(ridden, fmt.Sprintf("%s during the %s (%s): %s", op, f, f.Detail, op.Err))
				continue
			}
			fallthrough
		default:
			bad = append(bad, fmt.Sprintf("%s answered %s outside the ride-through of a restart: %s", op, op.Result, op.Err))
		}
	}
	return bad, ridden
}

// restartOf returns the restart op overlaps, from its SIGTERM to a second after the node
// caught up; of several, the last to begin before op ended (the likeliest cause).
func restartOf(h history.History, op history.Op) (f history.Fault, ok bool) {
	for _, r := range h.Faults {
		if op.End >= r.Start && op.Start <= max(r.Heal, r.Leader)+time.Second && (!ok || r.Start > f.Start) {
			f, ok = r, true
		}
	}
	return f, ok
}

// keepHistory writes h out of the test's temporary directories and logs where.
func keepHistory(t *testing.T, h history.History) {
	b, err := json.Marshal(h)
	if err == nil {
		name := strings.NewReplacer("/", "_", " ", "_", ",", "").Replace(t.Name())
		f := filepath.Join(os.TempDir(), fmt.Sprintf("latch-mixed-%s-%d.json", name, h.Seed))
		if err = os.WriteFile(f, b, 0o600); err == nil {
			t.Logf("history kept in %s", f)
			return
		}
	}
	t.Logf("keeping the history: %v", err)
}

// mixedWork is how long the workload runs on each cluster of TestMixedOldLeaderNewFollowers.
const mixedWork = 10 * time.Second

// TestMixedOldLeaderNewFollowers runs the contended workload through every node of a
// three-node cluster whose leader runs the previous build and whose followers run this one,
// then through one whose leader runs this build and whose followers the previous one. Each
// worker talks to one node only (worker i to node i mod 3), so followers of either build
// forward to a leader of the other. The leader must keep its leadership (and term)
// throughout, the history must be clean with every answer definite (or a grant so late that
// the client released it itself, which contention alone causes), and at the end every
// node has applied what the leader committed and reports the same last token.
//
// Revision 2 stays off throughout (a node of the previous build is a member): before and
// after the workload every node answers this build's client in latch/1 (no echo of its
// offer, so no G; grants and releases; Extend unsupported), no node reports the switch on,
// the followers of this build forward to the previous leader over the latch/1 forward
// channel (their peer port fallback), and the leader of this build says why the switch
// stays off. The leader's audit trail names a forwarded request's follower connection
// ("peer ADDR"), as before: no follower of the other build names its client.
func TestMixedOldLeaderNewFollowers(t *testing.T) {
	clustertest.Slow(t, "builds the previous latch and starts two clusters of both builds")
	prev, prevVersion := prevLatch(t)
	for _, c := range []struct {
		name     string
		bins     []string // n1 leads
		versions []string
	}{
		{"previous leader, new followers", []string{prev, "", ""}, []string{prevVersion, testVersion, testVersion}},
		{"new leader, previous followers", []string{"", prev, prev}, []string{testVersion, prevVersion, prevVersion}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			tc, sec, listens := startMixedCluster(t, c.bins)
			tc.lead(0)
			tc.expectVersions(c.versions...)
			l, before := tc.agreed(mixedRecovery)
			for i := range tc.procs {
				tc.expectLatch1(i)
			}
			load := startMixedLoad(t, sec, func(i int) []string { return []string{listens[i%len(listens)]} })
			time.Sleep(mixedWork)
			h := load.finish()
			tc.expectLeasesOff("after the workload")
			for i := range tc.procs {
				tc.expectLatch1(i)
			}
			tc.expectRevisionLogs()
			tc.expectAuditAcrossBuilds(l)

			after := tc.converged(mixedRecovery)
			if l != 0 || after[0].Raft.Term != before[0].Raft.Term || !after[0].Raft.Leading {
				t.Errorf("leadership moved during the workload:\nbefore\n%safter\n%s", showStatuses(before), showStatuses(after))
			}
			perNode := map[int]int{}
			for _, g := range history.Grants(h) {
				perNode[g.Worker%len(listens)]++
			}
			for i := range listens {
				if perNode[i] < 5 {
					t.Errorf("only %d grants through n%d (%s): %v", perNode[i], i+1, tc.procs[i].version(), perNode)
				}
			}
			tc.expectVersions(c.versions...)
			t.Logf("grants through n1..n3: %v; last token %d; %s", perNode, after[0].Raft.LastToken, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestRollingUpgradeAndBack starts three nodes of the previous build and, under the
// contended workload (every worker given all three nodes), rolls the two followers to this
// build (previous leader, new followers), hands leadership to one of them (new leader,
// previous follower: the leader restarts on its own binary until one of them leads), rolls both back to the previous build, and then every node to this
// build: each node in turn gets SIGTERM (exit 0) and starts again from the other binary on
// its data dir, and the next waits until it has caught up. The way back is open because the
// cluster's feature switch for revision 2 stays off while any node runs the previous build:
// no node reports it, and this build's client meets latch/1 at every node. Once the last
// node runs this build the switch comes on, and an extend through a follower and at the
// leader succeeds, under the same workload, and the leader's audit trail names the clients
// of its followers. On the way this build starts on directories the
// previous one wrote after it (its promised.json older than raft.db: it must start, with a
// warning). The history must be clean, every answer definite outside the ride-through of a
// restart, a grant within mixedRecovery of every restart, every node must start and serve,
// and at the end all are ready and have converged.
func TestRollingUpgradeAndBack(t *testing.T) {
	clustertest.Slow(t, "builds the previous latch and restarts three processes eight times or more under load")
	prev, prevVersion := prevLatch(t)
	start := time.Now()
	tc, sec, listens := startMixedCluster(t, []string{prev, prev, prev})
	tc.agreed(mixedRecovery)
	tc.expectVersions(prevVersion, prevVersion, prevVersion)
	load := startMixedLoad(t, sec, rotated(listens))
	time.Sleep(2 * time.Second) // the workload warms up on the old cluster

	lagging := 0 // starts of this build that found promised.json older than raft.db
	step := func(i int, bin, to string) {
		t.Helper()
		load.restart(tc, i, bin, to)
		want := prevVersion
		if bin == "" {
			want = testVersion
		}
		if got := tc.procs[i].version(); got != want {
			t.Fatalf("n%d runs %q after its restart to %s, want %q", i+1, got, to, want)
		}
		if strings.Contains(tc.procs[i].stderr.String(), "promised.json is older than raft.db") {
			lagging++
		}
		if slices.Contains(tc.bins, prev) {
			tc.expectLeasesOff(fmt.Sprintf("n%d restarted to %s", i+1, to))
			tc.expectLatch1(i)
		}
		time.Sleep(time.Second) // the mixed cluster serves for a while
	}
	order := tc.rollOrder()
	for _, i := range order[:2] {
		step(i, "", "this build")
	}
	t.Logf("previous leader, followers of this build at %s", time.Since(start).Round(time.Millisecond))
	for try := 0; tc.bins[tc.leader()] != ""; try++ { // the leader hands over until one of this build leads
		if try == 6 {
			t.Fatalf("no node of this build leads after six restarts of the leader")
		}
		l := tc.leader()
		step(l, tc.bins[l], "its own build, to hand leadership on")
	}
	t.Logf("leader of this build, a previous follower at %s", time.Since(start).Round(time.Millisecond))
	for _, i := range tc.rollOrder() {
		if tc.bins[i] == "" {
			step(i, prev, "the previous build")
		}
	}
	tc.expectVersions(prevVersion, prevVersion, prevVersion)
	t.Logf("back on the previous build at %s", time.Since(start).Round(time.Millisecond))
	for _, i := range tc.rollOrder() {
		step(i, "", "this build again")
	}
	tc.awaitLeasesOn()
	l := tc.leader()
	tc.expectExtends(l)
	tc.expectExtends((l + 1) % len(tc.procs))
	t.Logf("revision 2 on, extends through a follower and at the leader, at %s", time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	h := load.finish()

	sts := tc.converged(mixedRecovery)
	tc.expectVersions(testVersion, testVersion, testVersion)
	tc.expectAuditNamesClients(l)
	if n := strings.Count(tc.procs[l].stderr.String(), "protocol revision 2 switched on for the cluster"); n != 1 {
		t.Errorf("the leader logged the switch %d times, want once", n)
	}
	if len(h.Starts) < 8 {
		t.Errorf("%d node starts recorded, want at least 8", len(h.Starts))
	}
	// The last roll starts this build on directories whose promise the previous build let
	// fall behind raft.db's term (the way back's leader hand-over raised the term while the
	// follower rolled back before it ran the previous build): that path must have been
	// taken, and started.
	if lagging == 0 {
		t.Errorf("no start of this build found promised.json older than raft.db: the old-after-new path was not exercised")
	}
	t.Logf("%d starts, %d of this build after the previous one ran with a lagging promise; last token %d; %s",
		len(h.Starts), lagging, sts[0].Raft.LastToken, time.Since(start).Round(time.Millisecond))
}
