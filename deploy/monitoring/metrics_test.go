package monitoring_test

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

// clusterOnly are the metric families that only a cluster-mode node exports, by prefix, with
// why: a single-mode server lacking one is right, a cluster node lacking one is not.
var clusterOnly = map[string]string{
	"latch_raft_":    "Raft's term, indexes, voters, contact and commit latency: single mode has no log",
	"latch_forward_": "follower-to-leader forwarding: single mode has no leader to forward to",
}

func onlyOnCluster(name string) bool {
	for p := range clusterOnly {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// node is one latch process of the test.
type node struct {
	name, http string
	cmd        *exec.Cmd
	log        *clustertest.Buffer
	done       chan struct{}
}

// startNode starts bin with args and stops it (SIGTERM, then SIGKILL) at the end of the test.
func startNode(t *testing.T, bin, name, http string, args ...string) *node {
	t.Helper()
	n := &node{name: name, http: http, cmd: exec.Command(bin, args...), log: &clustertest.Buffer{}, done: make(chan struct{})}
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(clustertest.Bound):
			n.cmd.Process.Kill()
			<-n.done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, n.log)
		}
	})
	return n
}

func (n *node) get(path string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + n.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (n *node) waitReady(t *testing.T) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Bound, n.name+" ready", func() bool {
		code, _ := n.get("/readyz")
		return code == http.StatusOK
	})
}

// exported are the sample names of n's /metrics: each family's name from its # TYPE line,
// and a histogram's _bucket, _sum and _count.
func (n *node) exported(t *testing.T) map[string]bool {
	t.Helper()
	code, body := n.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s /metrics: %d %s", n.name, code, body)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		out[f[2]] = true
		if f[3] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[f[2]+s] = true
			}
		}
	}
	return out
}

// usedMetrics are the latch metric names of the alerting rules and the dashboard.
func usedMetrics(t *testing.T) []string {
	t.Helper()
	var queries []string
	for _, r := range alerts(t) {
		queries = append(queries, r.Expr)
	}
	queries = append(queries, readDashboard(t).queries(t)...)
	used := metricNames(queries)
	if len(used) < 10 {
		t.Fatalf("only %d latch metrics in the rules and the dashboard: %q", len(used), used)
	}
	return used
}

// TestMetricsExportedByRealNodes: every metric the alerting rules and the dashboard name is
// exported by a real single-mode server (but the cluster-only families) and by both the
// leader and a follower of a real three-node cluster, built from this repository.
func TestMetricsExportedByRealNodes(t *testing.T) {
	clustertest.Slow(t, "builds latch and starts four latch processes")
	used := usedMetrics(t)
	bin, remove, err := clustertest.BuildLatch()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	ports := clustertest.FreePorts(t, 11) // single: client, http; then each member: client, peer, http
	dir := t.TempDir()

	single := startNode(t, bin, "single", ports[1], "server", "--listen", ports[0], "--http", ports[1])
	var members []string
	for i := range 3 {
		members = append(members, fmt.Sprintf("n%d=%s", i+1, ports[3+3*i]))
	}
	var cluster []*node
	for i := range 3 {
		client, peer, http := ports[2+3*i], ports[3+3*i], ports[4+3*i]
		id := fmt.Sprintf("n%d", i+1)
		cluster = append(cluster, startNode(t, bin, id, http, "server", "--mode", "cluster", "--id", id,
			"--data-dir", filepath.Join(dir, id), "--listen", client, "--raft-addr", peer, "--http", http,
			"--initial-cluster", strings.Join(members, ",")))
	}
	single.waitReady(t)
	check := func(n *node, allowed func(string) bool) {
		t.Helper()
		have := n.exported(t)
		for _, m := range used {
			if !have[m] && !allowed(m) {
				t.Errorf("%s does not export %s, which the rules or the dashboard use", n.name, m)
			}
		}
	}
	check(single, onlyOnCluster)
	for _, n := range cluster {
		n.waitReady(t)
	}
	leading := func(n *node) bool {
		_, body := n.get("/metrics")
		return slices.Contains(strings.Split(body, "\n"), "latch_leading 1")
	}
	var leader, follower *node
	clustertest.Eventually(t, clustertest.Bound, "a leader and a follower", func() bool {
		leader, follower = nil, nil
		for _, n := range cluster {
			if leading(n) {
				leader = n
			} else {
				follower = n
			}
		}
		return leader != nil && follower != nil
	})
	none := func(string) bool { return false }
	check(leader, none)
	check(follower, none)
	t.Logf("checked %d metrics on the single node, leader %s and follower %s: %q", len(used), leader.name, follower.name, used)
}
