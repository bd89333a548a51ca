package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/clustertest"
)

// slowCluster is three nodes whose peer traffic all runs through proxies (clustertest.Proxy):
// node i listens for peers on raft[i] and advertises proxies[i].Addr, so every Raft RPC and
// every forwarded request to node i crosses proxies[i] (Down: the request into node i, Up:
// its answer).
type slowCluster struct {
	*testCluster
	proxies []*clustertest.Proxy
}

func startSlowCluster(t *testing.T) *slowCluster {
	t.Helper()
	const n = 3
	ports := clustertest.FreePorts(t, 2*n)
	listen, adv := ports[:n], ports[n:]
	sc := &slowCluster{testCluster: &testCluster{t: t, raft: adv, bins: make([]string, n), dataDir: t.TempDir()}}
	var ic []string
	for i := range n {
		sc.proxies = append(sc.proxies, clustertest.ListenProxy(t, adv[i], listen[i]))
		ic = append(ic, fmt.Sprintf("n%d=%s", i+1, adv[i]))
	}
	for i := range n {
		args := []string{"--mode", "cluster", "--id", fmt.Sprintf("n%d", i+1),
			"--data-dir", filepath.Join(sc.dataDir, fmt.Sprintf("n%d", i+1)),
			"--raft-addr", listen[i], "--advertise", adv[i], "--initial-cluster", strings.Join(ic, ",")}
		sc.args = append(sc.args, args)
		sc.procs = append(sc.procs, spawnServer(t, nil, args...))
	}
	for _, p := range sc.procs {
		p.awaitServing(t)
	}
	return sc
}

// shapeAll gives both directions of every proxy s.
func (sc *slowCluster) shapeAll(s clustertest.Shape) {
	for _, p := range sc.proxies {
		p.Set(clustertest.Down, s)
		p.Set(clustertest.Up, s)
	}
}

// servers is every node's client address.
func (sc *slowCluster) servers() string {
	var out []string
	for _, p := range sc.procs {
		out = append(out, p.listen)
	}
	return strings.Join(out, ",")
}

var termRe = regexp.MustCompile(`(?m)^latch_raft_term (\d+)`)

// maxTerm is the highest Raft term any node reports.
func (sc *slowCluster) maxTerm() uint64 {
	var top uint64
	for _, p := range sc.procs {
		_, body := httpGetQuiet(p.http + "/metrics")
		if m := termRe.FindStringSubmatch(body); m != nil {
			if v, _ := strconv.ParseUint(m[1], 10, 64); v > top {
				top = v
			}
		}
	}
	return top
}

// benchResult is what the checks read of `latch bench --json`.
type benchResult struct {
	Pairs     float64            `json:"pairs"`
	PairsPerS float64            `json:"pairs_per_s"`
	Acquire   map[string]float64 `json:"acquire_ms"`
	Errors    map[string]float64 `json:"errors"`
	Inversion float64            `json:"fencing_inversions"`
}

// bench runs `latch bench` for d against every node, 16 workers on 16 keys, waits covering
// a second of trouble, and checks what it must: grants made, no fencing inversion.
func (sc *slowCluster) bench(t *testing.T, what string, d time.Duration) benchResult {
	t.Helper()
	code, out := run(t, nil, "bench", "--servers", sc.servers(), "--clients", "16", "--keys", "16",
		"--duration", d.String(), "--warmup", "2s", "--wait", "10s", "--json")
	line := out[strings.LastIndex(strings.TrimSpace(out), "\n{")+1:]
	var r benchResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &r); err != nil {
		t.Fatalf("%s: bench exited %d; no result: %v\n%s", what, code, err, out)
	}
	t.Logf("%s: %.0f pairs/s, acquire p50 %.1f ms p99 %.1f ms, errors %v", what, r.PairsPerS, r.Acquire["p50"], r.Acquire["p99"], r.Errors)
	if r.Inversion != 0 {
		t.Errorf("%s: %v fencing inversions", what, r.Inversion)
	}
	if r.Pairs == 0 {
		t.Errorf("%s: no pair completed (exit %d)\n%s", what, code, out)
	}
	return r
}

// grantWithin acquires a fresh key through node i's client port with a wait of d, and
// releases it: the cluster serves again after a fault.
func (sc *slowCluster) grantWithin(t *testing.T, i int, key string, d time.Duration) {
	t.Helper()
	cl, err := client.New(client.Config{Servers: []string{sc.procs[i].listen}, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Second)
	defer cancel()
	tk, err := cl.Acquire(ctx, key, 0, client.AcquireOptions{Wait: d, Lease: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire %s through n%d after the fault: %v", key, i+1, err)
	}
	if err := tk.Release(ctx); err != nil {
		t.Fatalf("release %s: %v", key, err)
	}
}

// A cluster whose nodes are 50 ms apart (a cross-zone deployment: 25 ms each way, up to
// 10 ms jitter, through a userspace proxy since these kernels have no netem), then behind a
// 256 KiB/s cap on every link, then with one-way stalls and connection resets: every phase
// grants with no fencing inversion, elections settle (at most one per phase, none while
// links are only slow), and after each fault a client whose wait covers it gets its lock.
// The figures are logged (t.Logf) for the notes; nothing asserts a speed.
func TestClusterOverSlowLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts three nodes behind proxies and benches them for about a minute")
	}
	sc := startSlowCluster(t)
	sc.leader()
	base := sc.bench(t, "direct (proxies pass bytes at once)", 5*time.Second)

	sc.shapeAll(clustertest.Shape{Delay: 25 * time.Millisecond, Jitter: 10 * time.Millisecond})
	before := sc.maxTerm()
	slow := sc.bench(t, "50 ms between nodes", 10*time.Second)
	if after := sc.maxTerm(); after != before {
		t.Errorf("links only slow (50 ms): the term moved from %d to %d", before, after)
	}
	if base.PairsPerS > 0 {
		t.Logf("50 ms between nodes: %.2fx the pair rate of direct links", slow.PairsPerS/base.PairsPerS)
	}

	sc.shapeAll(clustertest.Shape{Delay: 25 * time.Millisecond, Jitter: 10 * time.Millisecond, Rate: 256 << 10})
	before = sc.maxTerm()
	sc.bench(t, "50 ms and 256 KiB/s per link", 5*time.Second)
	if after := sc.maxTerm(); after > before+1 {
		t.Errorf("capped links: the term moved from %d to %d", before, after)
	}

	slowLink := clustertest.Shape{Delay: 25 * time.Millisecond, Jitter: 10 * time.Millisecond}
	sc.shapeAll(slowLink)
	stalls := []struct {
		what string
		dir  int
		lead bool
	}{
		{"requests into the leader stall (followers cannot forward, or ask for votes)", clustertest.Down, true},
		{"the leader's answers stall", clustertest.Up, true},
		{"requests into a follower stall (it hears no leader)", clustertest.Down, false},
	}
	for k, s := range stalls {
		l := sc.leader()
		v := l
		if !s.lead {
			v = (l + 1) % len(sc.procs)
		}
		before := sc.maxTerm()
		stalled := slowLink
		stalled.Stall = true
		sc.proxies[v].Set(s.dir, stalled)
		time.Sleep(3 * time.Second) // past raft's election timeout
		sc.proxies[v].Set(s.dir, slowLink)
		for i := range sc.procs {
			sc.grantWithin(t, i, fmt.Sprintf("stall-%d-via-%d", k, i), 20*time.Second)
		}
		sc.leader()
		if after := sc.maxTerm(); after > before+2 {
			t.Errorf("%s: the term moved from %d to %d: elections did not settle", s.what, before, after)
		}
		t.Logf("%s (n%d, 3 s): served again through every node; term %d -> %d", s.what, v+1, before, sc.maxTerm())
	}

	before = sc.maxTerm()
	reset := 0
	for _, p := range sc.proxies {
		reset += p.Reset()
	}
	for i := range sc.procs {
		sc.grantWithin(t, i, fmt.Sprintf("reset-via-%d", i), 20*time.Second)
	}
	t.Logf("%d peer connections reset: served again through every node; term %d -> %d", reset, before, sc.maxTerm())
	sc.bench(t, "after the faults, 50 ms between nodes", 5*time.Second)
}
