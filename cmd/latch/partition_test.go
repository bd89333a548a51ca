package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

// TestClusterPartitionLeaderAndHeal cuts the leader of a three-node cluster off from the
// other two with a real network partition, checks that the majority moves on and the
// isolated node grants nothing, then heals the partition and checks that the old leader
// rejoins as a follower and serves again. Along the way: the old leader steps down within
// a bound of the cut; acquires sent to it while cut off (a free key, a waiter behind a held
// key, a release) are never granted or applied; after the heal the cluster's last token is
// still the majority's, and the key the old leader was asked for while cut off is free.
//
// It runs only as root with iproute2 (it skips otherwise, and with -short); about 5 s.
//
// The network is built from Linux network namespaces that the test creates and deletes
// itself: a hub namespace holding a bridge, and one namespace per node plus one for
// clients, each joined to the bridge by a veth pair, addressed from 10.213.0.0/24. No
// traffic touches the host's own interfaces. The partition is the hub end of the leader's
// veth set down: the leader's own interface stays up (it loses its carrier), so clients
// inside the leader's namespace still reach it on its address.
func TestClusterPartitionLeaderAndHeal(t *testing.T) {
	ipPath := partitionLabIPPath(t, "builds network namespaces and starts three processes")
	t.Parallel()
	start := time.Now()
	lab := newPartitionLab(t, ipPath, 3)
	lab.startNodes()

	// 1. One leader, and every node agrees on it.
	all := []int{0, 1, 2}
	old := lab.awaitLeader("initial leader", all, "", 60*time.Second)
	oldNode := lab.nodes[old]
	t.Logf("leader %s after %s", oldNode.id, time.Since(start).Round(time.Millisecond))

	// 2. A lock taken through the leader before the partition.
	code, out := lab.acquireRetry(lab.client, oldNode.listen(), "partition/before", "300s")
	t1 := lab.grantedToken(code, out, "acquiring partition/before through the leader "+oldNode.id)

	// 3. Partition the leader from the majority. Leadership may have moved since it was
	// found (an election under load): look again right before cutting, so the node cut off
	// is the one that leads at that moment.
	for attempt := 0; ; attempt++ {
		st, err := lab.status(lab.client, oldNode)
		if err == nil && st.Raft.Leading {
			break
		}
		if attempt >= 5 {
			t.Fatalf("%s no longer leads right before the partition (%v); cluster:\n%s", oldNode.id, err, lab.describe(all, lab.client))
		}
		old = lab.awaitLeader("leader before the partition", all, "", 30*time.Second)
		oldNode = lab.nodes[old]
	}
	majority := lab.others(old)
	lab.ipCmd("-n", lab.hub, "link", "set", oldNode.hubIf, "down")
	cut := time.Now()
	t.Logf("partitioned %s from %s and %s", oldNode.id, lab.nodes[majority[0]].id, lab.nodes[majority[1]].id)

	// Two acquires sent to the old leader at once, from inside its namespace, while it may
	// still believe it leads: one for a free key (it cannot commit) and one that queues
	// behind partition/before (waiters live on the leader). Neither may come back as a grant.
	type result struct {
		key  string
		code int
		out  string
		err  error
	}
	isolatedAcquires := make(chan result, 2)
	for _, a := range [][2]string{{"partition/inflight", "0"}, {"partition/before", "5s"}} {
		go func() {
			code, out, err := lab.latch(oldNode.ns, 30*time.Second, "acquire", "--json", "--wait", a[1], "--lease", "30s",
				"--servers", oldNode.listen(), "--secret-file", lab.secret, a[0])
			isolatedAcquires <- result{a[0], code, out, err}
		}()
	}

	// It steps down within a bound of the cut (raft's leader lease is 500 ms by default),
	// asked from inside its own namespace on its lab address.
	lab.await(oldNode.id+" steps down after the partition", 20*time.Second, func() (bool, string) {
		st, err := lab.status(oldNode.ns, oldNode)
		if err != nil {
			return false, err.Error()
		}
		return !st.Raft.Leading && st.Raft.State != "Leader" && !st.Node.Leading, st.String()
	})
	t.Logf("%s stepped down within %s of the partition", oldNode.id, time.Since(cut).Round(time.Millisecond))

	// 4. The majority elects a new leader; the lock taken before is still held there, and a
	// new grant's token is above it.
	nl := lab.awaitLeader("a new leader in the majority", majority, oldNode.id, 60*time.Second)
	newNode := lab.nodes[nl]
	follower := lab.nodes[majority[0]]
	if majority[0] == nl {
		follower = lab.nodes[majority[1]]
	}
	t.Logf("new leader %s %s after the partition", newNode.id, time.Since(cut).Round(time.Millisecond))
	code, out = lab.acquireRetry(lab.client, follower.listen(), "partition/before", "30s")
	if code != exitNotAcquired {
		t.Fatalf("partition/before through the majority follower %s: exit %d, want %d (still held):\n%s", follower.id, code, exitNotAcquired, out)
	}
	code, out = lab.acquireRetry(lab.client, newNode.listen(), "partition/during", "300s")
	t2 := lab.grantedToken(code, out, "acquiring partition/during through the new leader "+newNode.id)
	if t2 <= t1 {
		t.Fatalf("token %d on the new leader, not above %d granted before the partition", t2, t1)
	}

	// 5. The isolated old leader (stepped down above) grants and releases nothing.
	for range 2 {
		var r result
		select {
		case r = <-isolatedAcquires:
		case <-time.After(60 * time.Second):
			t.Fatal("an acquire sent to the isolated leader did not finish within 60 s")
		}
		if r.err != nil {
			t.Fatalf("acquire %s sent to the isolated leader: %v\n%s", r.key, r.err, r.out)
		}
		if r.code == 0 || strings.Contains(r.out, `"token":`) {
			t.Fatalf("the isolated old leader %s granted %s: exit %d\n%s", oldNode.id, r.key, r.code, r.out)
		}
		t.Logf("acquire %s sent to the isolated leader right after the cut: exit %d: %s", r.key, r.code, strings.TrimSpace(r.out))
	}
	code, out, err := lab.latch(oldNode.ns, 30*time.Second, "acquire", "--json", "--wait", "0", "--lease", "30s",
		"--servers", oldNode.listen(), "--secret-file", lab.secret, "partition/isolated")
	if err != nil {
		t.Fatal(err)
	}
	if code == 0 || strings.Contains(out, `"token":`) {
		t.Fatalf("the isolated node %s granted partition/isolated: exit %d\n%s", oldNode.id, code, out)
	}
	t.Logf("acquire through the isolated node after it stepped down: exit %d: %s", code, strings.TrimSpace(out))
	code, out, err = lab.latch(oldNode.ns, 30*time.Second, "release", "--servers", oldNode.listen(),
		"--secret-file", lab.secret, "partition/before", strconv.FormatUint(t1, 10))
	if err != nil {
		t.Fatal(err)
	}
	if code == 0 {
		t.Fatalf("the isolated node %s released partition/before (exit 0):\n%s", oldNode.id, out)
	}
	t.Logf("release through the isolated node: exit %d: %s", code, strings.TrimSpace(out))

	// 6. Heal. The old leader rejoins as a follower of a majority node, nothing it was sent
	// while cut off was applied, and through it a new grant gets a token above t2.
	lab.ipCmd("-n", lab.hub, "link", "set", oldNode.hubIf, "up")
	healed := time.Now()
	leader := lab.awaitLeader("every node following one leader after the heal", all, oldNode.id, 60*time.Second)
	lab.await(oldNode.id+" a follower after the heal", 30*time.Second, func() (bool, string) {
		st, err := lab.status(lab.client, oldNode)
		if err != nil {
			return false, err.Error()
		}
		return st.Raft.State == "Follower" && st.Raft.LeaderID == lab.nodes[leader].id, st.String()
	})
	t.Logf("%s follows %s %s after the heal", oldNode.id, lab.nodes[leader].id, time.Since(healed).Round(time.Millisecond))
	st, err := lab.status(lab.client, lab.nodes[leader])
	if err != nil {
		t.Fatal(err)
	}
	if st.Raft.LastToken != t2 {
		t.Fatalf("last token %d after the heal, want %d (nothing granted since partition/during):\n%s", st.Raft.LastToken, t2, st)
	}
	code, out = lab.acquireRetry(lab.client, oldNode.listen(), "partition/after", "30s")
	t3 := lab.grantedToken(code, out, "acquiring partition/after through the healed old leader "+oldNode.id)
	if t3 <= t2 {
		t.Fatalf("token %d through the healed old leader, not above %d", t3, t2)
	}
	code, out = lab.acquireRetry(lab.client, oldNode.listen(), "partition/before", "30s")
	if code != exitNotAcquired {
		t.Fatalf("partition/before through the healed old leader: exit %d, want %d (still held):\n%s", code, exitNotAcquired, out)
	}
	// The acquire the old leader took while cut off was never committed: the key is free.
	code, out = lab.acquireRetry(lab.client, oldNode.listen(), "partition/inflight", "30s")
	if t4 := lab.grantedToken(code, out, "acquiring partition/inflight after the heal"); t4 <= t3 {
		t.Fatalf("token %d after %d", t4, t3)
	}
	code, out, err = lab.latch(lab.client, 30*time.Second, "release", "--servers", oldNode.listen(),
		"--secret-file", lab.secret, "partition/before", strconv.FormatUint(t1, 10))
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("releasing partition/before (token %d) through the healed old leader: exit %d\n%s", t1, code, out)
	}
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// partitionLabIPPath skips the test unless it may build a partition lab (not -short, root,
// iproute2's ip found) and returns ip's path. what is what the test does, for the -short
// skip. Under CI=true a missing root or ip fails the test instead: .ci/run runs as root and
// installs iproute2.
func partitionLabIPPath(t *testing.T, what string) string {
	t.Helper()
	if testing.Short() {
		t.Skip(what + "; skipped with -short")
	}
	clustertest.NeedRoot(t, "creates network namespaces (ip netns)")
	ipPath := partitionIPPath()
	if ipPath == "" {
		clustertest.SkipUnlessCI(t, "needs iproute2's ip (not on PATH, nor in /usr/sbin, /sbin, /usr/bin, /bin)")
	}
	return ipPath
}

// partitionIPPath returns the path of iproute2's ip, or "".
func partitionIPPath() string {
	if p, err := exec.LookPath("ip"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// partitionLab is the namespaces, the network and the nodes of one partition test.
type partitionLab struct {
	t       *testing.T
	ipPath  string
	hub     string // namespace holding the bridge
	client  string // namespace the test's clients run in
	secret  string // the client secret file, shared by every node and client
	peer    string // the peer secret file of the nodes
	admin   string // the admin secret file
	dataDir string
	nodes   []*partitionNode
}

type partitionNode struct {
	id    string
	ns    string
	addr  string // its address inside the lab network
	hubIf string // the hub end of its veth pair
	p     *proc
}

func (n *partitionNode) listen() string { return n.addr + ":7400" }
func (n *partitionNode) http() string   { return n.addr + ":7402" }

// partitionSubnet is the lab network's prefix; it exists only inside the lab's namespaces.
const partitionSubnet = "10.213.0."

// newPartitionLab builds the namespaces and the network for nodes nodes (at most 99). Every
// namespace is deleted in t.Cleanup (after the processes in it are stopped), whatever
// happens.
func newPartitionLab(t *testing.T, ipPath string, nodes int) *partitionLab {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	prefix := "latchpt-" + hex.EncodeToString(b) + "-"
	lab := &partitionLab{t: t, ipPath: ipPath, hub: prefix + "hub", client: prefix + "cl", dataDir: t.TempDir()}
	lab.secret = writeSecretFile(t, lab.dataDir, "secret", hex.EncodeToString(b)+strings.Repeat("s", 40))
	lab.peer = writeSecretFile(t, lab.dataDir, "peer-secret", hex.EncodeToString(b)+strings.Repeat("p", 40))
	lab.admin = writeSecretFile(t, lab.dataDir, "admin-secret", hex.EncodeToString(b)+strings.Repeat("a", 40))

	// The hub first: if root may not create namespaces here (a container without
	// CAP_SYS_ADMIN), say so and skip rather than fail on the environment (fail under CI=true,
	// whose machine must allow it).
	if out, err := lab.ipRun("netns", "add", lab.hub); err != nil {
		if strings.Contains(out, "Operation not permitted") || strings.Contains(out, "Permission denied") {
			clustertest.SkipUnlessCI(t, fmt.Sprintf("root, but cannot create a network namespace here (no CAP_SYS_ADMIN?): ip netns add: %v: %s", err, out))
		}
		t.Fatalf("ip netns add %s: %v: %s", lab.hub, err, out)
	}
	lab.cleanupNS(lab.hub)
	lab.ipCmd("-n", lab.hub, "link", "set", "lo", "up")
	lab.ipCmd("-n", lab.hub, "link", "add", "br0", "type", "bridge")
	lab.ipCmd("-n", lab.hub, "link", "set", "br0", "up")

	// attach creates namespace ns with lo up and eth0 at addr, joined to the bridge by a
	// veth pair created inside the hub (so no interface ever appears on the host).
	attach := func(ns, hubIf, addr string) {
		lab.ipCmd("netns", "add", ns)
		lab.cleanupNS(ns)
		lab.ipCmd("-n", ns, "link", "set", "lo", "up")
		lab.ipCmd("-n", lab.hub, "link", "add", hubIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
		lab.ipCmd("-n", lab.hub, "link", "set", hubIf, "master", "br0")
		lab.ipCmd("-n", lab.hub, "link", "set", hubIf, "up")
		lab.ipCmd("-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
		lab.ipCmd("-n", ns, "link", "set", "eth0", "up")
	}
	for i := range nodes {
		n := &partitionNode{
			id:    fmt.Sprintf("n%d", i+1),
			ns:    fmt.Sprintf("%sn%d", prefix, i+1),
			addr:  fmt.Sprintf("%s%d", partitionSubnet, i+1),
			hubIf: fmt.Sprintf("vn%d", i+1),
		}
		attach(n.ns, n.hubIf, n.addr)
		lab.nodes = append(lab.nodes, n)
	}
	attach(lab.client, "vcl", partitionSubnet+"100")
	return lab
}

// ipRun runs ip with args, bounded, and returns its combined output.
func (lab *partitionLab) ipRun(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, lab.ipPath, args...).CombinedOutput()
	return string(out), err
}

// ipCmd runs ip with args and fails the test if it fails.
func (lab *partitionLab) ipCmd(args ...string) {
	lab.t.Helper()
	if out, err := lab.ipRun(args...); err != nil {
		lab.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// cleanupNS deletes namespace ns when the test ends. Cleanups run last registered first,
// so the processes started in it later are stopped by then; any process still inside (one
// this test started: nothing else enters these namespaces) is killed by its pid first.
func (lab *partitionLab) cleanupNS(ns string) {
	lab.t.Cleanup(func() {
		for range 50 {
			out, err := lab.ipRun("netns", "pids", ns)
			if err != nil || strings.TrimSpace(out) == "" {
				break
			}
			for _, f := range strings.Fields(out) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out, err := lab.ipRun("netns", "del", ns); err != nil {
			lab.t.Errorf("cleanup: ip netns del %s: %v: %s", ns, err, out)
		}
	})
}

// startNodes starts the cluster nodes, each in its namespace on its lab address.
func (lab *partitionLab) startNodes() {
	var ic []string
	for _, n := range lab.nodes {
		ic = append(ic, n.id+"="+n.addr+":7401")
	}
	for _, n := range lab.nodes {
		n.p = lab.spawnInNS(n.ns, "server", "--log-format", "json", "--mode", "cluster", "--id", n.id,
			"--data-dir", filepath.Join(lab.dataDir, n.id), "--listen", n.listen(), "--raft-addr", n.addr+":7401",
			"--http", n.http(), "--initial-cluster", strings.Join(ic, ","), "--secret-file", lab.secret,
			"--peer-secret-file", lab.peer, "--admin-secret-file", lab.admin)
	}
	for _, n := range lab.nodes { // they wait for each other before bootstrapping
		n.p.awaitServing(lab.t)
	}
}

// spawnInNS runs the latch binary with args inside namespace ns (ip netns exec replaces
// itself with it, so the process is latch itself); awaitServing waits until it serves. It
// is killed in t.Cleanup; its log is printed if the test failed.
func (lab *partitionLab) spawnInNS(ns string, args ...string) *proc {
	lab.t.Helper()
	cmd := exec.Command(lab.ipPath, append([]string{"netns", "exec", ns, latchBin}, args...)...)
	// Best effort against a test binary that dies without running its cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return spawn(lab.t, cmd, "latch in "+ns)
}

// latch runs the latch binary with args inside namespace ns, bounded by d, and returns its
// exit code and combined output. It does not touch t, so goroutines may call it; err is
// set only when it could not run or ran out of time.
func (lab *partitionLab) latch(ns string, d time.Duration, args ...string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, lab.ipPath, append([]string{"netns", "exec", ns, latchBin}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	var out clustertest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return -1, out.String(), fmt.Errorf("latch %s in %s did not finish within %s", strings.Join(args, " "), ns, d)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), nil
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), nil
	}
	return -1, out.String(), fmt.Errorf("latch %s in %s: %w", strings.Join(args, " "), ns, err)
}

// acquireRetry acquires key with --wait 0 through server, from namespace ns. An answer that
// says the request was definitely not applied (exit 69: no leader reachable yet, the
// forwarding link still pointing at the old leader) is retried, bounded in count and time;
// any other answer is returned.
func (lab *partitionLab) acquireRetry(ns, server, key, lease string) (int, string) {
	lab.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for attempt := 1; ; attempt++ {
		code, out, err := lab.latch(ns, 30*time.Second, "acquire", "--json", "--wait", "0", "--lease", lease,
			"--servers", server, "--secret-file", lab.secret, key)
		if err != nil {
			lab.t.Fatal(err)
		}
		if code != exitUnavailable {
			return code, out
		}
		if attempt >= 60 || time.Now().After(deadline) {
			lab.t.Fatalf("acquire %s through %s: still unavailable after %d attempts:\n%s", key, server, attempt, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// grantedToken returns the token of a successful `latch acquire --json`, or fails.
func (lab *partitionLab) grantedToken(code int, out, what string) uint64 {
	lab.t.Helper()
	if code != 0 {
		lab.t.Fatalf("%s: exit %d:\n%s", what, code, out)
	}
	var g struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(out), &g); err != nil || g.Token == 0 {
		lab.t.Fatalf("%s: no token in %q (%v)", what, out, err)
	}
	return g.Token
}

// partitionStatus is the part of `latch status --json` the test reads.
type partitionStatus struct {
	Node struct {
		Leading   bool   `json:"leading"`
		LastToken uint64 `json:"last_token"`
	} `json:"node"`
	Raft struct {
		ID           string `json:"id"`
		State        string `json:"state"`
		Leading      bool   `json:"leading"`
		LeaderID     string `json:"leader_id"`
		Term         uint64 `json:"term"`
		CommitIndex  uint64 `json:"commit_index"`
		AppliedIndex uint64 `json:"applied_index"`
		LastToken    uint64 `json:"last_token"`
	} `json:"raft"`
}

func (s partitionStatus) String() string {
	return fmt.Sprintf("%s: state %s leading %v (node %v) leader %q term %d commit %d applied %d last token %d",
		s.Raft.ID, s.Raft.State, s.Raft.Leading, s.Node.Leading, s.Raft.LeaderID, s.Raft.Term,
		s.Raft.CommitIndex, s.Raft.AppliedIndex, s.Raft.LastToken)
}

// status asks node n for its status, from namespace ns.
func (lab *partitionLab) status(ns string, n *partitionNode) (partitionStatus, error) {
	var st partitionStatus
	code, out, err := lab.latch(ns, 15*time.Second, "status", "--json", "--http", n.http())
	if err != nil {
		return st, err
	}
	if code != 0 {
		return st, fmt.Errorf("latch status of %s: exit %d: %s", n.id, code, strings.TrimSpace(out))
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("latch status of %s: %v: %q", n.id, err, out)
	}
	return st, nil
}

// others returns the indexes of the nodes other than i.
func (lab *partitionLab) others(i int) []int {
	var out []int
	for j := range lab.nodes {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

// describe is the status of the given nodes as seen from ns, for failure messages.
func (lab *partitionLab) describe(idx []int, ns string) string {
	var b strings.Builder
	for _, i := range idx {
		st, err := lab.status(ns, lab.nodes[i])
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", lab.nodes[i].id, err)
			continue
		}
		fmt.Fprintf(&b, "  %s\n", st)
	}
	return b.String()
}

// await polls cond every 200 ms until it holds, failing after d with cond's last detail.
func (lab *partitionLab) await(what string, d time.Duration, cond func() (bool, string)) {
	lab.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			lab.t.Fatalf("%s: not within %s; last: %s", what, d, detail)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// awaitLeader waits until, among the nodes idx (asked from the client namespace), exactly
// one leads with its leadership established, it is not the node named notID, every one of
// them names it as leader, and each has applied what it knows to be committed. It returns
// the leader's index.
func (lab *partitionLab) awaitLeader(what string, idx []int, notID string, d time.Duration) int {
	lab.t.Helper()
	leader := -1
	lab.await(what, d, func() (bool, string) {
		leader = -1
		var sts []partitionStatus
		var detail []string
		for _, i := range idx {
			st, err := lab.status(lab.client, lab.nodes[i])
			if err != nil {
				return false, err.Error()
			}
			sts = append(sts, st)
			detail = append(detail, st.String())
			if st.Raft.Leading && st.Node.Leading {
				if leader >= 0 {
					return false, "two leaders: " + strings.Join(detail, "; ")
				}
				leader = i
			}
		}
		if leader < 0 || lab.nodes[leader].id == notID {
			return false, strings.Join(detail, "; ")
		}
		for _, st := range sts {
			if st.Raft.LeaderID != lab.nodes[leader].id || st.Raft.AppliedIndex < st.Raft.CommitIndex {
				return false, strings.Join(detail, "; ")
			}
		}
		return true, ""
	})
	return leader
}
