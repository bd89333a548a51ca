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
// every node's process is sampled every chaosSoakEvery: its resident set (/proc/PID/status
// VmRSS), its open descriptors (/proc/PID/fd) and its goroutines (/metrics go_goroutines).
// No node is killed or restarted, so each node is one process from start to end; the run
// fails if any of the three grew by more than soakGrowthLimit from the sample nearest a sixth
// of the run (the 10th minute of 60) to the last, besides every check of a chaos run.

const (
	chaosSoakEvery  = 30 * time.Second
	soakGrowthLimit = 0.20
)

// sampleResources samples every node now and then every chaosSoakEvery, until the returned
// stop is called (which takes a last sample).
func (r *chaosRun) sampleResources() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(chaosSoakEvery)
		defer tk.Stop()
		for {
			r.sampleAll()
			select {
			case <-quit:
				r.sampleAll()
				return
			case <-tk.C:
			}
		}
	}()
	return func() { close(quit); <-done }
}

// sampleAll records a sample of every node's process that runs.
func (r *chaosRun) sampleAll() {
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
			var err error
			if s.RSS, err = vmRSS(pid); err != nil {
				r.log.Warn("soak sample", "node", s.Slot, "error", err)
				return
			}
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

// vmRSS reads the resident set of process pid in KiB.
func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
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
	}
	gs := history.ResourceGrowth(h.Resources, first+d/6)
	if len(gs) != nodes {
		t.Errorf("soak: growth of %d nodes, want %d (a node without two complete samples)", len(gs), nodes)
	}
	for _, g := range gs {
		name, worst := g.Worst()
		t.Logf("soak: %s", g)
		switch {
		case g.Restarted:
			t.Errorf("soak: %s was restarted: the soak's nemesis must not restart nodes", g.Slot)
		case worst > soakGrowthLimit:
			t.Errorf("soak: %s's %s grew by %.1f%%, more than %.0f%%: %s", g.Slot, name, 100*worst, 100*soakGrowthLimit, g)
		}
	}
}
