package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/clustertest/faultfs"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Failing disks and power cuts (issue 19, item 4), with the real binary: each node's
// --data-dir is on a fault filesystem of its own (cluster/clustertest/faultfs), which can
// fail every fsync with EIO, slow it down, or cut the power (keep only what was fsynced).
// The clients check what a lock service promises: every token a client saw is above every
// token granted before it (one client, one request at a time, so real-time order), none
// repeats, and a lock granted and still leased is still held after the fault.

// startFaultCluster starts n nodes as startTestCluster does, node i's data directory on the
// fault filesystem fss[i].
func startFaultCluster(t *testing.T, n int, extra ...string) (*testCluster, []*faultfs.FS) {
	t.Helper()
	root := t.TempDir()
	var fss []*faultfs.FS
	for i := range n {
		fss = append(fss, faultfs.Mount(t, filepath.Join(root, fmt.Sprintf("n%d", i+1))))
	}
	return startClusterAt(t, root, make([]string, n), func(int) []string { return extra }), fss
}

// tokens is what the test's clients were granted, in the order they were answered.
type tokens struct {
	t    *testing.T
	last uint64
	seen map[uint64]string
}

func newTokens(t *testing.T) *tokens { return &tokens{t: t, seen: map[uint64]string{}} }

// granted records a grant of key; it fails the test when the token repeats or is not above
// every token answered before it.
func (s *tokens) granted(key string, tok uint64) {
	s.t.Helper()
	if k, ok := s.seen[tok]; ok {
		s.t.Fatalf("token %d granted twice: for %q and now for %q", tok, k, key)
	}
	if tok <= s.last {
		s.t.Fatalf("token %d for %q after %d was granted: tokens went backwards", tok, key, s.last)
	}
	s.seen[tok], s.last = key, tok
}

// grant acquires and releases key through p once, recording the token; false when the node
// did not grant within a few seconds (it is down, or the cluster settles).
func (s *tokens) grant(p *proc, key string) bool {
	s.t.Helper()
	c, err := wiretest.DialErr(p.listen)
	if err != nil {
		return false
	}
	defer c.Close()
	c.Hello(s.t, nil)
	c.Raw(s.t, wiretest.Acquire(1, 0, 30, key))
	r, err := c.TryNext(5 * time.Second)
	if err != nil || r.Op != wire.OpAcquire {
		return false
	}
	s.granted(key, r.Token)
	c.Raw(s.t, wiretest.Release(1, r.Token, key))
	_, _ = c.TryNext(5 * time.Second) // a release may go unanswered when the node fails now
	return true
}

// grants takes n grants through p (retrying for up to 30 s each) and returns the last token.
func (s *tokens) grants(p *proc, prefix string, n int) uint64 {
	s.t.Helper()
	for i := range n {
		key := fmt.Sprintf("%s%d", prefix, i%8)
		deadline := time.Now().Add(30 * time.Second)
		for !s.grant(p, key) {
			if time.Now().After(deadline) {
				s.t.Fatalf("no grant of %q through %s within 30 s", key, p.listen)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return s.last
}

// hasExited reports whether p has exited.
func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// TestDiskFsyncEIOFailStops: an fsync that fails with EIO makes the node stop at once, with
// one line that names the failed fsync and exit 74; the other two keep granting, and with
// the disk healed the node starts again from its data directory and catches up. First a
// follower's disk fails, then the leader's.
func TestDiskFsyncEIOFailStops(t *testing.T) {
	clustertest.Slow(t, "starts three processes on FUSE mounts")
	tc, fss := startFaultCluster(t, 3)
	seen := newTokens(t)
	for round, role := range []string{"follower", "leader"} {
		l := tc.leader()
		v := l
		if role == "follower" {
			v = (l + 1) % 3
		}
		other := (v + 1) % 3
		seen.grants(tc.procs[other], fmt.Sprintf("eio/%d/before/", round), 20)
		fss[v].FailFsync(syscall.EIO)
		began := time.Now()
		for i := 0; !tc.procs[v].hasExited(); i++ { // writes reach every node's disk
			if time.Since(began) > time.Minute || i == 2000 {
				t.Fatalf("the %s n%d still runs a minute after its fsyncs began to fail (%d failed):\n%s",
					role, v+1, failedOf(fss[v]), tc.procs[v].stderr.String())
			}
			seen.grant(tc.procs[other], fmt.Sprintf("eio/%d/during/%d", round, i%8))
		}
		code := tc.procs[v].wait(t, time.Second)
		t.Logf("the %s n%d exited %d after %v (%d fsyncs failed); its last lines:\n%s", role, v+1, code,
			time.Since(began).Round(time.Millisecond), failedOf(fss[v]), tail(tc.procs[v].stderr.String(), 3))
		if code != exitLocalIO || !strings.Contains(tc.procs[v].stderr.String(), "disk failure: stopping this node at once") ||
			!strings.Contains(tc.procs[v].stderr.String(), "input/output error") {
			t.Fatalf("the %s exited %d after a failed fsync, want %d and the line that names the failed write:\n%s",
				role, code, exitLocalIO, tail(tc.procs[v].stderr.String(), 5))
		}
		tc.leader(v)
		seen.grants(tc.procs[other], fmt.Sprintf("eio/%d/without/", round), 20)

		// Started again on the failing disk, it refuses at once, exit 74, naming the fsync.
		p := spawnServer(t, nil, tc.args[v]...)
		if code := p.wait(t, time.Minute); code != exitLocalIO || !strings.Contains(p.stderr.String(), "input/output error") ||
			!strings.HasPrefix(tail(p.stderr.String(), 1), "latch server: the data directory's disk failed: ") ||
			!strings.Contains(p.stderr.String(), "repair or replace it") {
			t.Fatalf("started on a disk whose fsyncs fail: exit %d, want %d naming the EIO:\n%s", code, exitLocalIO, tail(p.stderr.String(), 5))
		}
		t.Logf("started on the failing disk: exit 74, %s", tail(p.stderr.String(), 1))

		fss[v].FailFsync(0)
		tc.procs[v] = startServer(t, nil, tc.args[v]...)
		l = tc.leader()
		tc.caughtUp(t, v, l)
		seen.grants(tc.procs[v], fmt.Sprintf("eio/%d/after/", round), 10)
	}
}

func failedOf(f *faultfs.FS) int64 { _, failed := f.Fsyncs(); return failed }

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// hold acquires key through p with a long lease and keeps it (closing the connection does
// not release a lock); it returns the token, recorded.
func (s *tokens) hold(p *proc, key string) uint64 {
	s.t.Helper()
	c := p.dial(s.t)
	defer c.Close()
	r := c.Do(s.t, wiretest.Acquire(1, 5, 3600, key))
	if r.Op != wire.OpAcquire {
		s.t.Fatalf("hold %q: %s", key, wiretest.Describe(r))
	}
	s.granted(key, r.Token)
	return r.Token
}

// stillHeld checks through p, after the fault, that every lock of held is held by the token
// it was granted: an acquire of it does not get it, and a release with that token does.
func (s *tokens) stillHeld(p *proc, held map[string]uint64) {
	s.t.Helper()
	c := p.dial(s.t)
	defer c.Close()
	for key, tok := range held {
		if r := c.Do(s.t, wiretest.Acquire(2, 0, 30, key)); r.Op != wire.OpTimeout {
			s.t.Fatalf("%q, granted token %d and leased for an hour, after the power cut: acquire answered %s, want held (T)",
				key, tok, wiretest.Describe(r))
		}
		if r := c.Do(s.t, wiretest.Release(3, tok, key)); r.Op != wire.OpRelease {
			s.t.Fatalf("%q after the power cut: release with its token %d answered %s: the grant was lost", key, tok, wiretest.Describe(r))
		}
	}
}

// load runs latch bench against every node (8 clients, bounded by --duration) until the
// leader has committed entries more entries, so that the nodes are writing when the power
// goes; stop kills it.
func (tc *testCluster) load(t *testing.T, entries uint64) (stop func()) {
	t.Helper()
	var servers []string
	for _, p := range tc.procs {
		servers = append(servers, p.listen)
	}
	cmd, _, _ := start(t, nil, "bench", "--servers", strings.Join(servers, ","), "--clients", "8", "--keys", "8",
		"--duration", "2m", "--warmup", "0s", "--wait", "5s")
	l := tc.leader()
	before, _ := tc.procs[l].logProgress()
	clustertest.Eventually(t, time.Minute, fmt.Sprintf("the load commits %d entries", entries), func() bool {
		s, ok := tc.procs[l].logProgress()
		return ok && s.Raft.CommitIndex >= before.Raft.CommitIndex+entries
	})
	return func() { cmd.Process.Kill() }
}

// cutPower cuts the power of the given nodes at once: their disks stop (PowerOff), the
// processes are killed (one may exit 74 first, on the EIO it met), and each disk keeps only
// what was fsynced (PowerCut, logged).
func (tc *testCluster) cutPower(t *testing.T, fss []*faultfs.FS, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		fss[i].PowerOff()
		_ = tc.procs[i].cmd.Process.Signal(syscall.SIGKILL) // it may have exited on the EIO already
	}
	for _, i := range nodes {
		tc.procs[i].wait(t, 30*time.Second)
		fss[i].DelayFsync(0, 0)
		cut, err := fss[i].PowerCut()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("power cut on n%d: %s", i+1, cut)
	}
}

// spawnAfterCut starts node i again after a power cut, without waiting; settle waits.
func (tc *testCluster) spawnAfterCut(t *testing.T, i int) *proc {
	t.Helper()
	return spawnServer(t, nil, tc.args[i]...)
}

// settle waits until node i, spawned after a power cut, serves (it becomes tc.procs[i];
// "" is returned) or refuses: then it must have exited 74 with the refusal line, returned.
func (tc *testCluster) settle(t *testing.T, i int, p *proc) string {
	t.Helper()
	select {
	case line := <-p.serving:
		p.serving <- line // for awaitServing
		p.awaitServing(t)
		tc.procs[i] = p
		return ""
	case <-p.exited:
		code := waitStatus(t, p.err)
		last := tail(p.stderr.String(), 1)
		if code != exitLocalIO || !strings.HasPrefix(last, refusalPrefix) {
			t.Fatalf("n%d after the power cut: exit %d, want it to serve or to refuse with %d and %q:\n%s",
				i+1, code, exitLocalIO, refusalPrefix, tail(p.stderr.String(), 10))
		}
		return last
	case <-time.After(time.Minute):
		t.Fatalf("n%d neither served nor refused within a minute of the power cut:\n%s", i+1, tail(p.stderr.String(), 10))
	}
	return ""
}

// rejoinEmpty does what a refusal says: the data directory moved aside (here: emptied),
// the node started again with its usual flags, so that it rejoins and catches up.
func (tc *testCluster) rejoinEmpty(t *testing.T, i int, fs *faultfs.FS) {
	t.Helper()
	entries, _ := os.ReadDir(fs.Dir)
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(fs.Dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	tc.procs[i] = startServer(t, nil, tc.args[i]...)
}

// TestDiskPowerCutOneNode: the power goes on one node (SIGKILL under load, then every write
// it had not fsynced is gone, and every new name whose directory was not fsynced): the leader's, then a follower's, then both again with its
// fsyncs slowed to 50-150 ms (so that the kill finds a batch written and not yet synced).
// It starts and catches up, or refuses with exit 74 and rejoins empty; either way no lock
// granted and still leased is lost, and every token granted after is above every token
// granted before.
func TestDiskPowerCutOneNode(t *testing.T) {
	clustertest.Slow(t, "starts three processes on FUSE mounts")
	tc, fss := startFaultCluster(t, 3)
	for _, fs := range fss {
		fs.StrictNames(true) // POSIX's letter: the stricter model
	}
	seen := newTokens(t)
	for round, role := range []string{"leader", "follower", "leader", "follower"} {
		l := tc.leader()
		v := l
		if role == "follower" {
			v = (l + 1) % 3
		}
		slow := round >= 2
		if slow {
			fss[v].DelayFsync(50*time.Millisecond, 150*time.Millisecond)
		}
		other := (v + 1) % 3
		seen.grants(tc.procs[other], fmt.Sprintf("cut1/%d/before/", round), 20)
		held := map[string]uint64{}
		for i := range 4 {
			key := fmt.Sprintf("cut1/%d/held/%d", round, i)
			held[key] = seen.hold(tc.procs[(v+i)%3], key) // through the victim too
		}
		began := time.Now()
		stop := tc.load(t, map[bool]uint64{false: 200, true: 20}[slow]) // a slow leader commits ~10 a second
		t.Logf("round %d: the %s n%d (slow fsync %v) under load after %v", round, role, v+1, slow, time.Since(began).Round(time.Millisecond))
		tc.cutPower(t, fss, v)
		stop()
		if refused := tc.settle(t, v, tc.spawnAfterCut(t, v)); refused != "" {
			t.Logf("round %d: n%d refused its data directory after the power cut: %s", round, v+1, refused)
			tc.rejoinEmpty(t, v, fss[v])
		} else {
			t.Logf("round %d: n%d started from its data directory after the power cut", round, v+1)
		}
		l = tc.leader()
		tc.caughtUp(t, v, l)
		seen.stillHeld(tc.procs[v], held)
		seen.grants(tc.procs[v], fmt.Sprintf("cut1/%d/after/", round), 10)
		t.Logf("round %d: done after %v", round, time.Since(began).Round(time.Millisecond))
	}
}

// TestDiskPowerCutAllNodes: the power goes on all three nodes at once, under load and with
// their fsyncs slowed to 50-150 ms (so that each holds writes not yet synced). Each
// starts from what it had fsynced, or refuses with exit 74; no lock granted and still leased
// is lost, and tokens go on above every token granted before.
func TestDiskPowerCutAllNodes(t *testing.T) {
	clustertest.Slow(t, "starts three processes on FUSE mounts")
	tc, fss := startFaultCluster(t, 3)
	for _, fs := range fss {
		fs.StrictNames(true) // POSIX's letter: the stricter model
	}
	seen := newTokens(t)
	l := tc.leader()
	seen.grants(tc.procs[l], "cutall/before/", 20)
	held := map[string]uint64{}
	for i := range 6 {
		key := fmt.Sprintf("cutall/held/%d", i)
		held[key] = seen.hold(tc.procs[i%3], key)
	}
	for _, fs := range fss { // the kill finds batches written and not yet synced
		fs.DelayFsync(50*time.Millisecond, 150*time.Millisecond)
	}
	stop := tc.load(t, 20)
	tc.cutPower(t, fss, 0, 1, 2)
	stop()
	l = tc.startAllAfterCut(t, fss)
	seen.stillHeld(tc.procs[(l+1)%3], held)
	seen.grants(tc.procs[l], "cutall/after/", 10)
}

// metric is the value of the sample name (a full sample name, labels and all) in p's
// /metrics, and whether it is there.
func (p *proc) metric(name string) (float64, bool) {
	_, body := httpGetQuiet(p.http + "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// terms is each live node's raft term.
func (tc *testCluster) terms(t *testing.T) []uint64 {
	t.Helper()
	var out []uint64
	for i, p := range tc.procs {
		s, ok := p.logProgress()
		if !ok {
			t.Fatalf("no /v1/status from n%d", i+1)
		}
		out = append(out, s.Raft.Term)
	}
	return out
}

// TestDiskSlowFsync: every node's fsyncs take 100-200 ms. Commits get slow (each needs the
// leader's sync and then a follower's), but heartbeats do not wait for the disk: no election
// storm (the term grows by at most 2), and every grant is right. The commit latency is logged.
func TestDiskSlowFsync(t *testing.T) {
	clustertest.Slow(t, "starts three processes on FUSE mounts")
	t0 := time.Now()
	tc, fss := startFaultCluster(t, 3)
	seen := newTokens(t)
	l := tc.leader()
	seen.grants(tc.procs[l], "slow/warm/", 10)
	t.Logf("started and warmed up in %v", time.Since(t0).Round(time.Millisecond))
	before := tc.terms(t)
	for _, fs := range fss {
		fs.DelayFsync(100*time.Millisecond, 200*time.Millisecond)
	}
	sum0, _ := tc.procs[l].metric("latch_raft_commit_latency_seconds_sum")
	n0, _ := tc.procs[l].metric("latch_raft_commit_latency_seconds_count")
	stop := tc.load(t, 20) // 8 clients besides the test's own, for 20 entries at least
	t.Logf("under load with slow fsyncs after %v", time.Since(t0).Round(time.Millisecond))
	const grants = 20
	began := time.Now()
	var slowest time.Duration
	for i := range grants { // bounded: 20 grants, each retried for 30 s at most
		start := time.Now()
		seen.grants(tc.procs[i%3], fmt.Sprintf("slow/%d/", i), 1)
		slowest = max(slowest, time.Since(start))
		if time.Since(began) > 3*time.Minute {
			t.Fatalf("%d grants took more than 3 minutes with slow fsyncs", i)
		}
	}
	took := time.Since(began)
	stop()
	held := map[string]uint64{"slow/held": seen.hold(tc.procs[(l+1)%3], "slow/held")}
	sum1, _ := tc.procs[l].metric("latch_raft_commit_latency_seconds_sum")
	n1, _ := tc.procs[l].metric("latch_raft_commit_latency_seconds_count")
	after := tc.terms(t)
	all, _ := fss[l].Fsyncs()
	var mean time.Duration
	if n1 > n0 {
		mean = time.Duration((sum1 - sum0) / (n1 - n0) * float64(time.Second))
	}
	t.Logf("slow fsync (100-200 ms on every node): %d grants in %v (%v each, slowest %v with release); leader's commit latency %v mean over %.0f entries; terms %v -> %v; %d fsyncs on the leader's disk",
		grants, took.Round(time.Millisecond), (took / grants).Round(time.Millisecond), slowest.Round(time.Millisecond),
		mean.Round(time.Millisecond), n1-n0, before, after, all)
	for i := range after {
		if after[i] > before[i]+2 {
			t.Fatalf("n%d's term went from %d to %d with slow fsyncs: an election storm", i+1, before[i], after[i])
		}
	}
	for _, fs := range fss {
		fs.DelayFsync(0, 0)
	}
	seen.stillHeld(tc.procs[tc.leader()], held)
	t.Logf("done after %v", time.Since(t0).Round(time.Millisecond))
}

// TestDiskPowerCutAfterSnapshot: under load until every node has taken a snapshot (raft's
// own, every 30-60 s past 4096 entries) and compacted its log, the power goes on all three,
// on disks that keep a new name only once its directory is fsynced (faultfs.StrictNames:
// POSIX's letter, stricter than ext4 and XFS). Each starts, or refuses with exit 74; no lock
// granted and still leased is lost, and tokens go on above every token granted.
func TestDiskPowerCutAfterSnapshot(t *testing.T) {
	clustertest.Slow(t, "starts three processes on FUSE mounts, loads them for a minute or two")
	tc, fss := startFaultCluster(t, 3)
	seen := newTokens(t)
	for _, fs := range fss {
		fs.StrictNames(true)
	}
	l := tc.leader()
	held := map[string]uint64{"snapcut/held": seen.hold(tc.procs[l], "snapcut/held")}
	seen.grants(tc.procs[l], "snapcut/before/", 10)
	stop := tc.load(t, 5000)
	clustertest.Eventually(t, 3*time.Minute, "every node takes a snapshot", func() bool {
		for i := range tc.procs {
			if snaps, _ := filepath.Glob(filepath.Join(tc.nodeDir(i), "snapshots", "*", "meta.json")); len(snaps) == 0 {
				return false
			}
		}
		return true
	})
	held["snapcut/held-after-snapshot"] = seen.hold(tc.procs[l], "snapcut/held-after-snapshot")
	tc.cutPower(t, fss, 0, 1, 2)
	stop()
	l = tc.startAllAfterCut(t, fss)
	seen.stillHeld(tc.procs[(l+1)%3], held)
	seen.grants(tc.procs[l], "snapcut/after/", 10)
}

// startAllAfterCut starts every node again after a power cut of all of them (fss: their
// filesystems): each starts from its data directory or refuses it (exit 74); at most one may
// refuse, and it rejoins empty. It returns the leader, once every node has caught up with it.
func (tc *testCluster) startAllAfterCut(t *testing.T, fss []*faultfs.FS) int {
	t.Helper()
	var spawned []*proc
	for i := range tc.procs {
		spawned = append(spawned, tc.spawnAfterCut(t, i))
	}
	var refused []int
	for i, p := range spawned {
		if line := tc.settle(t, i, p); line != "" {
			t.Logf("n%d refused its data directory after the power cut: %s", i+1, line)
			refused = append(refused, i)
		} else {
			t.Logf("n%d started from its data directory after the power cut", i+1)
		}
	}
	if len(refused) > 1 {
		t.Fatalf("%d of 3 nodes refused their data directories after one power cut: the cluster has no quorum", len(refused))
	}
	for _, i := range refused {
		tc.rejoinEmpty(t, i, fss[i])
	}
	l := tc.leader()
	for i := range tc.procs {
		tc.caughtUp(t, i, l)
	}
	return l
}
