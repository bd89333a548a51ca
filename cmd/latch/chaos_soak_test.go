package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest/history"
)

// The soak run (`make soak`: TestClusterChaos with LATCH_CHAOS_MODE=soak): the workload and
// a nemesis of pauses and partitions only (chaosSoakKinds), for LATCH_CHAOS_DURATION, while
// every node's process is sampled about every chaosSoakEvery: its resident set
// (/proc/PID/status VmRSS), its open descriptors (/proc/PID/fd) and its goroutines (/metrics
// go_goroutines). No node is killed or restarted, so each node is one process from start to
// end; the run fails if any of the three grew by more than soakGrowthLimit from the sample
// nearest a sixth of the run (the 10th minute of 60) to the last, besides every check of a
// chaos run.
//
// What a node holds also depends on what it does, and the figures must not move with that:
// samples are taken between faults (before the nemesis injects the next one, once
// chaosSoakEvery has passed since the last, and once more at the end), never while a node is
// paused or cut off; every worker talks to one node only (worker i to node i mod n), so no
// client connection drifts from node to node as the pool's slots move on after a fault; and a
// node's last sample is compared with one taken in the same role (leader or follower), since
// the leader holds the followers' forwarding and replication connections and their goroutines.

const (
	chaosSoakEvery  = 30 * time.Second
	soakGrowthLimit = 0.20
)

// pinned gives worker i the one server i mod len(servers).
func pinned(servers []string) func(worker int) []string {
	return func(i int) []string { return []string{servers[i%len(servers)]} }
}

// sampleDue samples every node if chaosSoakEvery has passed since the last samples.
func (r *chaosRun) sampleDue() {
	if r.sampled == 0 || r.rec.Now()-r.sampled >= chaosSoakEvery {
		r.sampleAll()
	}
}

// sampleAll records a sample of every node's process that runs and answers.
func (r *chaosRun) sampleAll() {
	r.sampled = r.rec.Now()
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		pid := n.pid()
		if pid == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := history.ResourceSample{At: r.rec.Now(), Slot: r.spec.Nodes[i].ID, PID: pid, Goroutines: -1}
			st, err := r.status(i)
			if err != nil {
				r.log.Warn("soak sample", "node", s.Slot, "error", err)
				return
			}
			s.Leading = st.Raft.Leading
			mem, err := procStatus(pid, "VmRSS", "RssAnon", "RssFile")
			if err != nil {
				r.log.Warn("soak sample", "node", s.Slot, "error", err)
				return
			}
			s.RSS, s.RSSAnon, s.RSSFile = mem[0], mem[1], mem[2]
			fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			if err != nil {
				r.log.Warn("soak sample", "node", s.Slot, "error", err)
				return
			}
			s.FDs = len(fds)
			if g, err := r.goroutines(i); err == nil {
				s.Goroutines = g
			}
			r.rec.AddResources(s)
		}()
	}
	wg.Wait()
}

// procStatus reads the named fields of /proc/PID/status, in KiB (each 0 if absent; an
// error if the first is).
func procStatus(pid int, names ...string) ([]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(names))
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		for i, name := range names {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				out[i], err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("/proc/%d/status %s: %v", pid, name, err)
				}
				found = found || i == 0
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("/proc/%d/status has no %s", pid, names[0])
	}
	return out, nil
}

// goroutines reads node i's go_goroutines from its /metrics.
func (r *chaosRun) goroutines(i int) (int, error) {
	resp, err := r.http.Get("http://" + r.spec.Nodes[i].http() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("/metrics has no go_goroutines")
}

// checkSoak fails the test if a node's resident set, descriptors or goroutines grew by more
// than soakGrowthLimit from the sample nearest a sixth of the run d (counted from the first
// sample, when the nemesis began) to its last, or if a node was restarted in between.
func checkSoak(t *testing.T, h history.History, d time.Duration, nodes int) {
	t.Helper()
	if len(h.Resources) == 0 {
		t.Errorf("soak: no resource samples")
		return
	}
	first := h.Resources[0].At
	for _, s := range h.Resources {
		first = min(first, s.At)
		role := "follower"
		if s.Leading {
			role = "leader"
		}
		t.Logf("soak sample %s %s pid %d: rss %d KiB (anon %d, file %d), descriptors %d, goroutines %d, %s",
			s.At.Round(time.Second), s.Slot, s.PID, s.RSS, s.RSSAnon, s.RSSFile, s.FDs, s.Goroutines, role)
	}
	gs := history.ResourceGrowth(h.Resources, first+d/6)
	if len(gs) != nodes {
		t.Errorf("soak: growth of %d nodes, want %d (a node without two complete samples)", len(gs), nodes)
	}
	for _, g := range gs {
		name, worst := g.Worst()
		if g.RoleChanged {
			t.Logf("soak: %s took no sample before its last in the role it ends in: compared across roles", g.Slot)
		}
		t.Logf("soak: %s", g)
		switch {
		case g.Restarted:
			t.Errorf("soak: %s was restarted: the soak's nemesis must not restart nodes", g.Slot)
		case worst > soakGrowthLimit:
			t.Errorf("soak: %s's %s grew by %.1f%%, more than %.0f%%: %s", g.Slot, name, 100*worst, 100*soakGrowthLimit, g)
		}
	}
}
