package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest/history"
)

// TestChaosUpgrade runs the chaos lab's workload (every worker given all three nodes) while
// the nemesis rolls a three-node cluster from the previous build (prevLatch) to this one and
// back: each node in turn gets SIGTERM, starts again on the other binary with its data
// directory, and the next waits until it has caught up with an agreed leader (then the
// settle of every fault: a grant, a leader, a quiet second). Followers go first, the leader
// last, so each pass costs one leader hand-over. The first node to run this build gets
// --hold-leases, the documented way to keep the rollback open (docs/protocol.md, "Revision 2
// in cluster mode"): the cluster's feature switch stays off, so no extend may be confirmed,
// and every extend is answered unsupported. Each round is up then down; rounds repeat while
// LATCH_CHAOS_DURATION lasts (one at least).
//
// The history must pass history.Check (no overlapping holders, tokens rising, no early N, a
// grant within 5 s of every restart, no term with two leaders, every start served), every
// node must state the build it was started on, and every answer must be definite outside the
// documented ride-through of a restart (checkAnswers: indeterminate, unavailable or a
// timeout only for operations that overlap one, from its SIGTERM to a second after the
// node caught up and a leader was agreed).
//
// It runs with LATCH_CHAOS_UPGRADE=1 (`make chaos`), as root with iproute2, and not in
// `make test` or CI: it builds the previous revision and restarts nodes six times a round.
func TestChaosUpgrade(t *testing.T) {
	if os.Getenv("LATCH_CHAOS_UPGRADE") != "1" {
		t.Skip("set LATCH_CHAOS_UPGRADE=1 (make chaos does) to roll a cluster between the previous build and this one under the chaos workload")
	}
	ipPath := partitionLabIPPath(t, "builds network namespaces and rolls a cluster between two builds under load")
	cfg, err := chaosConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Nodes != 3 || cfg.Mode != chaosModeFaults {
		t.Fatalf("TestChaosUpgrade runs three nodes of every mode's workload: LATCH_CHAOS_NODES=%d, LATCH_CHAOS_MODE=%q", cfg.Nodes, cfg.Mode)
	}
	prev, prevVersion := prevLatch(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lab := newPartitionLab(t, ipPath, cfg.Nodes)
	cfg.Mode = chaosModeUpgrade
	spec := newChaosSpec(ipPath, lab, cfg)
	spec.Prev, spec.PrevVersion = prev, prevVersion
	// No flag of this build may reach a node of the previous one.
	args := spec.serverArgs(spec.Nodes[0], spec.Nodes[0].ID, spec.initialCluster(), "")
	checkServerFlags(t, prev, args)
	checkServerFlags(t, latchBin, append(args, "--hold-leases"))
	t.Logf("chaos upgrade: %s <-> %s for %s, seed %d", prevVersion, testVersion, cfg.Duration, cfg.Seed)

	defer keepChaosEvidenceIfFailed(t, lab.dataDir, cfg.Seed)
	h, sum := runChaos(t, lab, self, spec)
	bad, ridden := checkAnswers(h)
	for i, b := range bad {
		if i < 20 {
			t.Errorf("%s", b)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d answers outside the ride-through in all", len(bad))
	}
	t.Logf("%d operations answered indeterminate, unavailable or timed out within the ride-through of a restart", len(ridden))
	for i, r := range ridden {
		if i < 10 {
			t.Logf("ride-through: %s", r)
		}
	}
	steps := 0
	for _, f := range h.Faults {
		if f.Kind == faultUpgrade {
			steps++
		}
	}
	if steps < 6 || steps%6 != 0 {
		t.Errorf("%d upgrade steps, want whole rounds of six (three up, three down)", steps)
	}
	if sum.Ops["acquire ok"] < 50 || sum.HoldsReleased == 0 || sum.HoldsExpired == 0 {
		t.Errorf("%d grants, holds released %d, expired %d: the workload did not run as it must", sum.Ops["acquire ok"], sum.HoldsReleased, sum.HoldsExpired)
	}
	if sum.ExtendsConfirmed > 0 {
		t.Errorf("%d extends confirmed while a member held revision 2 off (--hold-leases, or the previous build)", sum.ExtendsConfirmed)
	}
}

// faultUpgrade is one node's restart on the other build.
const faultUpgrade = "upgrade"

// chaosUpgradeRound bounds what a round of six steps takes (about 8 s on a busy two-core
// machine: a second or two per step and its settle), for the check whether another fits in
// the duration.
const chaosUpgradeRound = 20 * time.Second

// upgrades is the nemesis of chaosModeUpgrade (TestChaosUpgrade).
func (r *chaosRun) upgrades() {
	end := r.rec.Now() + r.spec.Duration
	for round := 0; round == 0 || r.rec.Now()+chaosUpgradeRound < end; round++ {
		for k, i := range r.rollOrder() {
			r.upgradeStep(i, r.spec.Latch, testVersion, k == 0)
		}
		for _, i := range r.rollOrder() {
			r.upgradeStep(i, r.spec.Prev, r.spec.PrevVersion, false)
		}
	}
}

// rollOrder is the followers of the agreed leader, then the leader (the order of the slots
// when no leader is agreed within chaosLeaderSearchTime).
func (r *chaosRun) rollOrder() []int {
	l := r.leader(chaosLeaderSearchTime)
	var order []int
	for i := range r.nodes {
		if i != l {
			order = append(order, i)
		}
	}
	if l >= 0 {
		order = append(order, l)
	}
	return order
}

// upgradeStep restarts node i on bin, which states version, with --hold-leases if hold,
// waits until it has caught up, lets the cluster settle, and records the step as a fault.
func (r *chaosRun) upgradeStep(i int, bin, version string, hold bool) {
	n := r.nodes[i]
	f := history.Fault{Kind: faultUpgrade, Nodes: []string{n.spec.ID}, Start: r.rec.Now(), Detail: "to " + version}
	if hold {
		f.Detail += " --hold-leases"
	}
	f.Detail += "; " + r.stopNode(n)
	n.bin = bin
	n.setArgs(r.spec, n.spec.ID, r.spec.initialCluster(), "")
	if hold {
		n.args = append(n.args, "--hold-leases")
	}
	f.Heal = r.rec.Now()
	switch {
	case !n.start():
		f.Failed = true
		f.Detail += "did not start"
	case n.servedVersion() != version:
		f.Failed = true
		f.Detail += fmt.Sprintf("states version %q", n.servedVersion())
	case !r.awaitCaughtUp(i, chaosMemberWait):
		f.Failed = true
		f.Detail += fmt.Sprintf("not caught up with an agreed leader within %s", chaosMemberWait)
	}
	f.Detail = strings.TrimSuffix(f.Detail, "; ")
	r.log.Info("upgrade step", "node", n.spec.ID, "detail", f.Detail, "failed", f.Failed)
	f.Leader = r.settle(f.Heal)
	r.rec.AddFault(f)
}

// servedVersion is the version n's last start stated.
func (n *chaosNode) servedVersion() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.version
}
