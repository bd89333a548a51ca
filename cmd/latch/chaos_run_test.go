package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/clustertest/history"
)

// The chaos lab's inner process: the test binary run again inside the lab's client
// namespace (TestClusterChaos starts it with runChaosInner, below). It starts the nodes,
// drives the workload (chaos_workload_test.go) and the nemesis (chaos_nemesis_test.go), and
// writes the history to chaosSpec.Out; it checks nothing itself.

// chaosEnv names the environment variable that makes the test binary a chaos lab's inner
// process: its value is a chaosSpec in JSON.
const chaosEnv = "LATCH_TEST_CHAOS"

// chaosSpec is what the inner process runs: the lab chaos_test.go built, and the run's
// parameters.
type chaosSpec struct {
	IP, Latch, Hub          string
	Nodes                   []chaosNodeSpec
	Secret, Peer, Admin     string
	DataDir, Out            string
	Duration                time.Duration
	Seed                    uint64
	Hold, Quiet             time.Duration // how long a fault lasts; calm after a recovery
	Workers, Keys           int
	Lease, Wait, ProbeEvery time.Duration
	// Extenders: how many of the workers keep their locks by extending, with leases of
	// ExtendLease to 2 s more (chaos_workload_test.go).
	Extenders   int
	ExtendLease time.Duration
	// Mode is what the nemesis does: chaosModeFaults (every fault kind), chaosModeSoak (no
	// kills or restarts, with every node's resources sampled) or chaosModeUpgrade (rolling
	// between this build and Prev, chaos_upgrade_test.go).
	Mode string
	// Prev is the previous build's binary (chaosModeUpgrade: every node starts on it), which
	// states PrevVersion.
	Prev, PrevVersion string
}

type chaosNodeSpec struct {
	ID, NS, Addr, HubIf string
}

func (n chaosNodeSpec) listen() string { return n.Addr + ":7400" }
func (n chaosNodeSpec) http() string   { return n.Addr + ":7402" }

// runChaosInner runs the test binary as the chaos lab's inner process (chaosMain) in the
// lab's client namespace, bounded by d, logging its lines as they come.
func runChaosInner(t *testing.T, lab *partitionLab, self string, spec chaosSpec, d time.Duration) {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, lab.ipPath, "netns", "exec", lab.client, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), chaosEnv+"="+string(js))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = os.Stdout
	if err := startOnThread(cmd); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		t.Log(strings.TrimRight(sc.Text(), "\n"))
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the chaos run did not finish within %s", d)
	}
	if err != nil {
		t.Errorf("the chaos run's inner process: %v", err)
	}
}

// chaosRun is the inner process's state.
type chaosRun struct {
	spec  chaosSpec
	log   hclog.Logger
	rec   *history.Recorder
	rng   *rand.Rand // the nemesis's; workers have their own
	nodes []*chaosNode
	work  *chaosWorkload
	http  *http.Client
	gen   int // nodes replaced by new ones so far (their ids: the slot's id, -r, gen)
	// sampled is when the nodes' resources were last sampled (soak runs).
	sampled time.Duration
}

// chaosMain runs the inner process and returns its exit code: 0 once the history is
// written (whatever it holds), 1 if the lab could not be brought up or written down.
func chaosMain(specJSON string) int {
	log := hclog.New(&hclog.LoggerOptions{Name: "chaos", Output: os.Stderr, Level: hclog.Info})
	var spec chaosSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		log.Error("bad spec", "error", err)
		return 1
	}
	r := &chaosRun{spec: spec, log: log, rec: history.NewRecorder(spec.Seed, len(spec.Nodes)),
		rng:  rand.New(rand.NewPCG(spec.Seed, 0x6e656d65)),
		http: &http.Client{Timeout: time.Second}}
	defer r.stopNodes()
	err := r.run()
	if werr := r.write(); werr != nil {
		log.Error("writing the history", "error", werr)
		return 1
	}
	if err != nil {
		log.Error("run aborted", "error", err)
		return 1
	}
	return 0
}

// run brings the cluster up, runs the workload under the nemesis for the duration, lets it
// settle and stops the workload.
func (r *chaosRun) run() error {
	bin := r.spec.Latch
	if r.spec.Mode == chaosModeUpgrade {
		bin = r.spec.Prev
	}
	for _, n := range r.spec.Nodes {
		c := &chaosNode{spec: n, ip: r.spec.IP, log: r.log, rec: r.rec, bin: bin}
		c.setArgs(r.spec, n.ID, r.spec.initialCluster(), "")
		r.nodes = append(r.nodes, c)
	}
	if !r.startAll(r.nodes) {
		return fmt.Errorf("a node did not start (see the node logs in %s)", r.spec.DataDir)
	}
	if r.leader(60*time.Second) < 0 {
		return fmt.Errorf("no leader within 60 s of the start")
	}
	r.log.Info("cluster up", "nodes", len(r.nodes), "at", r.rec.Now().Round(time.Millisecond))
	if r.spec.Mode != chaosModeUpgrade { // the previous build has no revision 2: it stays off
		r.awaitLeases(chaosLeasesWait)
	}
	var servers []string
	for _, n := range r.spec.Nodes {
		servers = append(servers, n.listen())
	}
	stopViews := r.watchLeaders()
	defer stopViews()
	serversOf := rotated(servers)
	if r.spec.Mode == chaosModeSoak {
		serversOf = pinned(servers) // chaos_soak_test.go
	}
	r.work = startChaosWorkload(r.spec, serversOf, r.rec, r.log)
	defer r.work.stop()
	time.Sleep(r.spec.Quiet) // the workload warms up
	if r.spec.Mode == chaosModeUpgrade {
		r.upgrades()
	} else {
		r.nemesis()
	}
	r.settle(r.rec.Now())
	if r.spec.Mode == chaosModeSoak {
		r.sampleAll()
	}
	return nil
}

// initialCluster is the --initial-cluster of the lab's nodes, as first started.
func (s chaosSpec) initialCluster() string {
	var ic []string
	for _, n := range s.Nodes {
		ic = append(ic, n.ID+"="+n.Addr+":7401")
	}
	return strings.Join(ic, ",")
}

// serverArgs are the flags of a node in lab slot n under id (after the binary): its
// addresses, data directory and the lab's secrets; then --initial-cluster ic, or, for a node
// added later, --join (a member's --http) and --advertise.
func (s chaosSpec) serverArgs(n chaosNodeSpec, id, ic, join string) []string {
	args := []string{"server", "--log-format", "json", "--mode", "cluster", "--id", id,
		"--data-dir", filepath.Join(s.DataDir, id), "--listen", n.listen(), "--raft-addr", n.Addr + ":7401",
		"--http", n.http(), "--secret-file", s.Secret, "--peer-secret-file", s.Peer, "--admin-secret-file", s.Admin}
	if ic != "" {
		args = append(args, "--initial-cluster", ic)
	}
	if join != "" {
		args = append(args, "--join", join, "--advertise", n.Addr+":7401")
	}
	return args
}

// chaosLeasesWait bounds the wait for the cluster's feature switch before the workload starts:
// the leader turns it on once it has seen every member serve revision 2, and asks again every
// 3 s while it is off.
const chaosLeasesWait = 30 * time.Second

// awaitLeases waits up to d until every node reports protocol revision 2 on (/v1/status
// features.leases: the cluster's feature switch is in its applied log) and records when. The
// workload starts after it either way: a client's connections carry the revision only if the
// node served it when they were made, so connections made before the switch could never
// extend. If the switch stays off, every extend is answered unsupported, and TestClusterChaos
// fails for want of a confirmed one.
func (r *chaosRun) awaitLeases(d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		on := 0
		for i := range r.nodes {
			if r.leasesOn(i) {
				on++
			}
		}
		if on == len(r.nodes) {
			r.rec.SetLeasesOn(r.rec.Now())
			r.log.Info("protocol revision 2 on (the cluster's feature switch)", "at", r.rec.Now().Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			r.log.Warn("protocol revision 2 is not on on every node: extends will be answered unsupported", "within", d, "nodes_on", on)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leasesOn asks node i whether its /v1/status reports protocol revision 2 on.
func (r *chaosRun) leasesOn(i int) bool {
	resp, err := r.http.Get("http://" + r.spec.Nodes[i].http() + "/v1/status")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Features struct {
			Leases bool `json:"leases"`
		} `json:"features"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&st) == nil && st.Features.Leases
}

// write writes the history as JSON to spec.Out.
func (r *chaosRun) write() error {
	h := r.rec.History()
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	r.log.Info("history written", "ops", len(h.Ops), "faults", len(h.Faults), "starts", len(h.Starts))
	return os.WriteFile(r.spec.Out, b, 0o600)
}

// startAll starts nodes at once (they may wait for each other) and reports whether every
// one served.
func (r *chaosRun) startAll(nodes []*chaosNode) bool {
	var wg sync.WaitGroup
	ok := make([]bool, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); ok[i] = n.start() }()
	}
	wg.Wait()
	for _, o := range ok {
		if !o {
			return false
		}
	}
	return true
}

func (r *chaosRun) stopNodes() {
	for _, n := range r.nodes {
		n.kill(syscall.SIGKILL)
	}
}

// status asks node i for its status over HTTP (bounded by the client's 1 s timeout).
func (r *chaosRun) status(i int) (partitionStatus, error) {
	var st partitionStatus
	resp, err := r.http.Get("http://" + r.spec.Nodes[i].http() + "/v1/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status of %s: HTTP %d", r.spec.Nodes[i].ID, resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// leader waits up to d until exactly one node leads with its leadership established and
// every node that answers names it; it returns its index, or -1.
func (r *chaosRun) leader(d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		sts := make([]*partitionStatus, len(r.nodes))
		var wg sync.WaitGroup
		for i := range r.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if st, err := r.status(i); err == nil {
					sts[i] = &st
				}
			}()
		}
		wg.Wait()
		if l := agreedLeader(sts); l >= 0 {
			return l
		}
		if time.Now().After(deadline) {
			return -1
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agreedLeader is the index of the one node of sts (nil: no answer) that leads, if every
// answering node names it as leader; else -1.
func agreedLeader(sts []*partitionStatus) int {
	l := -1
	for i, st := range sts {
		if st != nil && st.Raft.Leading && st.Node.Leading {
			if l >= 0 {
				return -1
			}
			l = i
		}
	}
	if l < 0 {
		return -1
	}
	for _, st := range sts {
		if st != nil && st.Raft.LeaderID != sts[l].Raft.ID {
			return -1
		}
	}
	return l
}

// chaosNode is one node's process, started again after each kill.
type chaosNode struct {
	spec    chaosNodeSpec // its ID changes when the nemesis replaces the node by a new one
	ip      string
	bin     string   // the latch binary it runs
	args    []string // its flags (serverArgs)
	dataDir string   // its --data-dir
	ic      string   // its --initial-cluster ("": a node that joined)
	logPath string   // the process's log, appended to by every start
	log     hclog.Logger
	rec     *history.Recorder

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	version string // what its last start's "latch serving" line said
	// stopping: the nemesis sent SIGKILL or SIGTERM since the last start, so an exit is its
	// doing; any other exit is recorded (history.NodeExit).
	stopping bool
}

// spawner is the goroutine, locked to its OS thread for the life of the process, that starts
// the chaos lab's processes. Pdeathsig is sent when the thread that forked the child ends,
// not its process, and a thread the Go runtime ends would take its children with it.
var spawner struct {
	once sync.Once
	ch   chan func()
}

// startOnThread starts cmd from the spawner's thread.
func startOnThread(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.ch = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawner.ch {
				f()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.ch <- func() { done <- cmd.Start() }
	return <-done
}

// start starts the node (ip netns exec replaces itself with latch, so the process is latch
// itself), appends its log to <data-dir>/<id>.log, waits until it logs that it serves
// (30 s at most), records the start and reports whether it served.
func (n *chaosNode) start() bool {
	at := n.rec.Now()
	res := history.NodeStart{Node: n.spec.ID, At: at}
	defer func() {
		res.Took = n.rec.Now() - at
		n.rec.AddStart(res)
		if !res.OK {
			n.log.Error("node did not start", "node", n.spec.ID, "detail", res.Detail)
		}
	}()
	logFile, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		res.Detail = err.Error()
		return false
	}
	cmd := exec.Command(n.ip, append([]string{"netns", "exec", n.spec.NS, n.bin}, n.args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = logFile, pw
	if err := startOnThread(cmd); err != nil {
		logFile.Close()
		res.Detail = err.Error()
		return false
	}
	exited, serving := make(chan struct{}), make(chan map[string]any, 1)
	go func() {
		cmd.Wait()
		pw.Close()
		n.mu.Lock()
		expected := n.stopping || n.cmd != cmd
		n.mu.Unlock()
		if !expected { // not the nemesis's doing: a crash, or a signal from elsewhere
			at := n.rec.Now()
			n.log.Error("node exited without the nemesis stopping it", "node", n.spec.ID, "pid", cmd.Process.Pid, "state", cmd.ProcessState.String(), "at", at.Round(time.Millisecond))
			n.rec.AddExit(history.NodeExit{Node: n.spec.ID, At: at, State: fmt.Sprintf("pid %d: %v", cmd.Process.Pid, cmd.ProcessState)})
		}
		close(exited)
	}()
	go func() {
		defer logFile.Close()
		scanServing(pr, logFile, serving)
	}()
	n.mu.Lock()
	n.cmd, n.exited, n.stopping = cmd, exited, false
	n.mu.Unlock()
	select {
	case line := <-serving:
		res.OK = true
		n.mu.Lock()
		n.version, _ = line["version"].(string)
		n.mu.Unlock()
	case <-exited:
		res.Detail = fmt.Sprintf("exited before serving: %v", cmd.ProcessState)
	case <-time.After(30 * time.Second):
		res.Detail = "did not log 'latch serving' within 30 s"
	}
	return res.OK
}

// setArgs gives the node the id, flags, data directory and log of a node under id in its
// slot (serverArgs); it must not be running.
func (n *chaosNode) setArgs(s chaosSpec, id, ic, join string) {
	n.spec.ID, n.ic = id, ic
	n.args = s.serverArgs(n.spec, id, ic, join)
	n.dataDir = filepath.Join(s.DataDir, id)
	n.logPath = filepath.Join(s.DataDir, id+".log")
}

// pid is the node's process id, or 0 when it has none.
func (n *chaosNode) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// expectExit makes the next exit of the node's process the nemesis's doing.
func (n *chaosNode) expectExit() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopping = true
}

// kill sends sig to the node's process, if one runs; after SIGKILL or SIGTERM its exit is
// expected.
func (n *chaosNode) kill(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		n.stopping = true
	}
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Signal(sig)
	}
}

// waitExit waits up to d for the node's process to exit and reports whether it did.
func (n *chaosNode) waitExit(d time.Duration) bool {
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	if exited == nil {
		return true
	}
	select {
	case <-exited:
		return true
	case <-time.After(d):
		return false
	}
}
