package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/latchd/latch/cluster/clustertest/history"
)

// The chaos lab's nemesis: one fault at a time, each kind once per cycle in a seeded
// order, until the run's duration is spent. After each heal it waits for a grant (the
// recovery the checker bounds) and a leader, then lets the cluster be for spec.Quiet.

// Fault kinds.
const (
	faultKillLeader       = "kill-9-leader"
	faultKillFollower     = "kill-9-follower"
	faultPauseLeader      = "sigstop-leader"
	faultPartitionLeader  = "partition-leader"
	faultPartitionMinor   = "partition-minority"
	faultKillAll          = "kill-9-all"
	faultRollingRestart   = "rolling-sigterm-restart"
	faultReplaceNew       = "replace-new"    // a follower removed, a new node with a new id joins
	faultReplaceSame      = "replace-same"   // a node's disk lost: wiped, started again empty
	chaosFaultEstimate    = 10 * time.Second // a fault and its settling, for the last start
	chaosElectionTimeout  = time.Second      // raft's default, which the nodes run with
	chaosStopGrace        = 20 * time.Second // a SIGTERM'd node must have exited by then
	chaosLeaderSearchTime = 15 * time.Second
)

var chaosFaultKinds = []string{faultKillLeader, faultKillFollower, faultPauseLeader,
	faultPartitionLeader, faultPartitionMinor, faultKillAll, faultRollingRestart,
	faultReplaceNew, faultReplaceSame}

// chaosSoakKinds are the faults of a soak run: none kills or restarts a node, so each node is
// one process from the start to the end and its resources can be compared over the run.
var chaosSoakKinds = []string{faultPauseLeader, faultPartitionLeader, faultPartitionMinor}

// Modes of a chaos run (chaosSpec.Mode).
const (
	chaosModeFaults  = ""
	chaosModeSoak    = "soak"
	chaosModeUpgrade = "upgrade"
)

// chaosKinds are the fault kinds the nemesis of mode picks from.
func chaosKinds(mode string) []string {
	if mode == chaosModeSoak {
		return chaosSoakKinds
	}
	return chaosFaultKinds
}

// nemesis injects faults from now until fewer than chaosFaultEstimate of the duration is
// left (every cycle of the mode's kinds runs in a new seeded order).
func (r *chaosRun) nemesis() {
	end := r.rec.Now() + r.spec.Duration
	var order []string
	for r.rec.Now()+chaosFaultEstimate < end {
		if len(order) == 0 {
			order = append([]string(nil), chaosKinds(r.spec.Mode)...)
			r.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		kind := order[0]
		order = order[1:]
		if r.spec.Mode == chaosModeSoak {
			r.sampleDue() // between faults, the cluster settled (chaos_soak_test.go)
		}
		f, ok := r.inject(kind)
		if !ok {
			r.log.Warn("fault skipped", "kind", kind, "detail", f.Detail)
			continue
		}
		r.log.Info("fault", "kind", f.Kind, "nodes", strings.Join(f.Nodes, ","), "start", f.Start.Round(time.Millisecond),
			"heal", f.Heal.Round(time.Millisecond), "detail", f.Detail)
		f.Leader = r.settle(f.Heal)
		r.rec.AddFault(f)
	}
}

// settle waits (bounded) for a grant answered after heal and for an agreed leader, then
// for spec.Quiet; it returns when the leader was first seen agreed (0: not within the
// bound).
func (r *chaosRun) settle(heal time.Duration) (leaderAt time.Duration) {
	found := make(chan time.Duration, 1)
	go func() {
		if r.leader(chaosLeaderSearchTime) >= 0 {
			found <- r.rec.Now()
			return
		}
		found <- 0
	}()
	deadline := time.Now().Add(chaosLeaderSearchTime)
	for r.work.LastGrant() < heal && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	leaderAt = <-found
	if g := r.work.LastGrant(); g >= heal {
		r.log.Info("recovered", "grant_after_heal", (g - heal).Round(time.Millisecond), "leader_after_heal", (leaderAt - heal).Round(time.Millisecond))
	} else {
		r.log.Warn("no grant after the heal", "within", chaosLeaderSearchTime)
	}
	if leaderAt == 0 {
		r.log.Warn("no agreed leader after the heal", "within", chaosLeaderSearchTime)
	}
	time.Sleep(r.spec.Quiet)
	return leaderAt
}

// inject runs one fault of kind to its heal; ok is false if it could not start (no leader
// to aim at), with f.Detail saying why.
func (r *chaosRun) inject(kind string) (f history.Fault, ok bool) {
	f.Kind = kind
	l := r.leader(chaosLeaderSearchTime)
	if l < 0 {
		f.Detail = fmt.Sprintf("no agreed leader within %s", chaosLeaderSearchTime)
		return f, false
	}
	var victims []int
	switch kind {
	case faultReplaceNew:
		return r.replaceNew(f, l), true
	case faultReplaceSame:
		return r.replaceSame(f, r.rng.IntN(len(r.nodes))), true
	case faultKillLeader, faultPauseLeader, faultPartitionLeader:
		victims = []int{l}
	case faultKillFollower:
		victims = r.followers(l, 1)
	case faultPartitionMinor:
		victims = r.followers(l, (len(r.nodes)-1)/2)
	case faultKillAll, faultRollingRestart:
		victims = r.rng.Perm(len(r.nodes))
	}
	for _, v := range victims {
		f.Nodes = append(f.Nodes, r.nodes[v].spec.ID)
	}
	f.Start = r.rec.Now()
	switch kind {
	case faultKillLeader, faultKillFollower, faultKillAll:
		for _, v := range victims {
			r.nodes[v].kill(syscall.SIGKILL)
		}
		for _, v := range victims {
			if !r.nodes[v].waitExit(10 * time.Second) {
				f.Detail += r.nodes[v].spec.ID + " still running 10 s after SIGKILL; "
			}
		}
		// Every node down: restarted after a second (the point is recovery from disk; a
		// longer outage only lengthens the client's reconnect backoff, 2 s at most).
		if kind == faultKillAll {
			time.Sleep(time.Second)
		} else {
			time.Sleep(r.spec.Hold)
		}
		f.Heal = r.rec.Now()
		r.startAll(r.pick(victims))
	case faultPauseLeader:
		n := r.nodes[l]
		n.kill(syscall.SIGSTOP)
		time.Sleep(max(r.spec.Hold, 3*chaosElectionTimeout))
		f.Heal = r.rec.Now()
		n.kill(syscall.SIGCONT)
	case faultPartitionLeader, faultPartitionMinor:
		for _, v := range victims {
			f.Detail += r.link(v, "down")
		}
		time.Sleep(r.spec.Hold)
		f.Heal = r.rec.Now()
		for _, v := range victims {
			f.Detail += r.link(v, "up")
		}
	case faultRollingRestart:
		f.Heal, f.Detail = r.rollingRestart(victims)
	}
	return f, true
}

// followers picks n nodes other than the leader l.
func (r *chaosRun) followers(l, n int) []int {
	var out []int
	for _, i := range r.rng.Perm(len(r.nodes)) {
		if i != l && len(out) < n {
			out = append(out, i)
		}
	}
	return out
}

func (r *chaosRun) pick(idx []int) []*chaosNode {
	var out []*chaosNode
	for _, i := range idx {
		out = append(out, r.nodes[i])
	}
	return out
}

// link sets the hub end of node i's veth up or down; it returns "" or what went wrong.
func (r *chaosRun) link(i int, state string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.spec.IP, "-n", r.spec.Hub, "link", "set", r.spec.Nodes[i].HubIf, state).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("ip link set %s %s: %v: %s; ", r.spec.Nodes[i].HubIf, state, err, out)
	}
	return ""
}

// rollingRestart stops each node in order with SIGTERM, starts it again once it exited,
// and waits (bounded) until it follows an agreed leader before the next one. The heal is
// the start of the last node.
func (r *chaosRun) rollingRestart(order []int) (heal time.Duration, detail string) {
	for _, i := range order {
		n := r.nodes[i]
		n.kill(syscall.SIGTERM)
		if !n.waitExit(chaosStopGrace) {
			detail += fmt.Sprintf("%s still running %s after SIGTERM (killed); ", n.spec.ID, chaosStopGrace)
			r.log.Error("node did not stop on SIGTERM", "node", n.spec.ID, "within", chaosStopGrace)
			n.kill(syscall.SIGKILL)
			n.waitExit(10 * time.Second)
		}
		heal = r.rec.Now()
		if n.start() && !r.awaitCaughtUp(i, chaosLeaderSearchTime) {
			detail += fmt.Sprintf("%s not caught up with an agreed leader within %s of its restart; ", n.spec.ID, chaosLeaderSearchTime)
		}
	}
	return heal, detail
}

// awaitCaughtUp waits up to d until node i follows the agreed leader and has applied
// what that leader had committed when first asked.
func (r *chaosRun) awaitCaughtUp(i int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	var leaderID string
	var commit uint64
	for time.Now().Before(deadline) {
		if leaderID == "" {
			if l := r.leader(time.Second); l >= 0 {
				if st, err := r.status(l); err == nil && st.Raft.Leading {
					leaderID, commit = st.Raft.ID, st.Raft.CommitIndex
				}
			}
			continue
		}
		if st, err := r.status(i); err == nil && st.Raft.LeaderID == leaderID && st.Raft.AppliedIndex >= commit {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
