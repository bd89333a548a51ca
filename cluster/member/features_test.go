package member

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/wire"
)

// startLone starts a member that belongs to no cluster yet (no --initial-cluster, no
// --join): it waits to be added. It has startCluster's secrets.
func startLone(t *testing.T, id string, hold bool) *tmember {
	t.Helper()
	secret := []byte("member-test-peer-secret-0123456789abcdef")
	cfg := DefaultConfig()
	cfg.Raft.ID, cfg.Raft.DataDir = id, filepath.Join(t.TempDir(), "data")
	cfg.Listen, cfg.HTTP = clustertest.FreePorts(t, 1)[0], "127.0.0.1:0"
	cfg.Peer.Secrets = [][]byte{secret}
	cfg.Admin = admin.Credentials{AdminSecrets: [][]byte{[]byte("member-test-admin-secret-0123456789abcdef")}, PeerSecrets: cfg.Peer.Secrets}
	cfg.Logger = clustertest.Logger(t, id, hclog.Info)
	cfg.HoldLeases = hold
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	m, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go m.Server().Serve(ln)
	tm := &tmember{m: m, clients: ln.Addr().String()}
	t.Cleanup(func() {
		if !tm.stopped {
			stop(t, tm)
		}
	})
	return tm
}

// leasesOn reports whether every running member of ms has the switch on.
func leasesOn(ms []*tmember) bool {
	for _, tm := range ms {
		if !tm.stopped && !tm.m.Leases() {
			return false
		}
	}
	return true
}

// forwardThrough makes a grant and a release through the follower f, so that its link has
// a connection to the leader, and returns what that connection carries.
func forwardThrough(t *testing.T, f *tmember) uint8 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	cl := newClient(t, f.clients)
	tk, err := cl.Acquire(ctx, "through-"+f.m.ID(), 0, client.AcquireOptions{Lease: time.Minute})
	if err != nil {
		t.Fatalf("acquire through %s: %v", f.m.ID(), err)
	}
	if err := tk.Release(ctx); err != nil {
		t.Fatalf("release through %s: %v", f.m.ID(), err)
	}
	return f.m.link.Stats().Revs
}

// The feature switch end to end in one process: it stays off while one member holds
// revision 2 back (its peer port refuses the revised forward channel, byte for byte as a
// latch without the revision does), with every follower's link speaking what its leader
// serves; it comes on once that member is removed; from then on a member that refuses the
// channel cannot be added, and one that cannot be asked enters as a nonvoter and gets no vote.
func TestFeatureSwitch(t *testing.T) {
	ms := startCluster(t, 3, func(c *Config) { c.HoldLeases = c.Raft.ID == "m2" })
	leader, _ := leaderOf(t, ms)
	holder := ms[2]

	// Every follower's link speaks what the leader serves: latch/1 to m2, revision 2 to
	// the others.
	for _, tm := range ms {
		if tm == leader {
			continue
		}
		want := uint8(wire.FlagLeases)
		if leader == holder {
			want = 0
		}
		if got := forwardThrough(t, tm); got != want {
			t.Fatalf("%s's link to %s carries revisions %#x, want %#x", tm.m.ID(), leader.m.ID(), got, want)
		}
	}
	// Off while m2 is a member: the leader has asked it and been refused (when m2 leads, it
	// asks nobody: it holds the revision back itself, and the links were refused above).
	clustertest.Eventually(t, clustertest.Bound, "dials of the revised channel refused by m2", func() bool { return holder.m.mux.Stats().Rejected >= 2 })
	for _, tm := range ms {
		if tm.m.Leases() {
			t.Fatalf("%s has the switch on while m2 holds revision 2 back", tm.m.ID())
		}
		if st := tm.m.AdminOptions("b").Status().(map[string]any); st["features"].(map[string]bool)["leases"] {
			t.Fatalf("%s's status says leases while the switch is off: %v", tm.m.ID(), st["features"])
		}
	}

	// m2 leaves: every server left serves the revision, and the switch comes on.
	if leader == holder {
		holder.m.Raft().StepDown(context.Background())
		leader, _ = leaderOf(t, ms)
	}
	// Each phase has a deadline of its own: the waits between them are not bounded by it.
	phase := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
		t.Cleanup(cancel)
		return ctx
	}
	ctx := phase()
	if err := leader.m.Admin().RemoveMember(ctx, "m2"); err != nil {
		t.Fatalf("remove m2: %v", err)
	}
	stop(t, holder)
	clustertest.Eventually(t, clustertest.Bound, "the switch on every member", func() bool { return leasesOn(ms) })
	for _, tm := range ms[:2] {
		if st := tm.m.AdminOptions("b").Status().(map[string]any); !st["features"].(map[string]bool)["leases"] {
			t.Fatalf("%s's status: features %v, want leases", tm.m.ID(), st["features"])
		}
		if tm != leader {
			if got := forwardThrough(t, tm); got != wire.FlagLeases {
				t.Fatalf("%s's link carries revisions %#x, want FlagLeases", tm.m.ID(), got)
			}
		}
	}

	// A member that refuses the revised channel is refused, through a follower and at the
	// leader, before anything changes.
	old := startLone(t, "m3", true)
	ctx = phase()
	for _, via := range ms[:2] {
		err := via.m.Admin().AddMember(ctx, "m3", old.m.adv, true)
		if !errors.Is(err, outcome.Refused) || !strings.Contains(err.Error(), "does not serve it") {
			t.Fatalf("adding m3, which holds revision 2 back, via %s: %v; want it rejected, saying why", via.m.ID(), err)
		}
	}
	if err := leader.m.Admin().AddMember(ctx, "m3", old.m.adv, false); !errors.Is(err, outcome.Refused) {
		t.Fatalf("adding m3 as a nonvoter: %v, want it rejected", err)
	}
	for _, s := range leader.m.Raft().Servers() {
		if s.ID == "m3" {
			t.Fatalf("m3 is in the configuration: %+v", leader.m.Raft().Servers())
		}
	}

	// One that cannot be asked (nothing runs at its address yet) enters as a nonvoter, and
	// the catch-up wait gives it no vote.
	nowhere := clustertest.FreePorts(t, 1)[0]
	short, cancelShort := context.WithTimeout(context.Background(), catchUpMargin+5*time.Second)
	defer cancelShort()
	err := leader.m.Admin().AddMember(short, "m4", nowhere, true)
	if err == nil || !strings.Contains(err.Error(), "revision 2") {
		t.Fatalf("adding m4, which does not run: %v; want no vote, saying it has not shown revision 2", err)
	}
	suffrage := ""
	for _, s := range leader.m.Raft().Servers() {
		if s.ID == "m4" {
			suffrage = s.Suffrage
		}
	}
	if suffrage != "nonvoter" {
		t.Fatalf("m4 is %q in %+v, want a nonvoter", suffrage, leader.m.Raft().Servers())
	}
	if err := leader.m.Admin().RemoveMember(phase(), "m4"); err != nil {
		t.Fatalf("remove m4: %v", err)
	}
}

// probeLeases against the three kinds of peer port: one that serves the revised forward
// channel (a session answers the ping), one that refuses it (peer.ErrRejected), and an
// address where nothing listens (an error that is not a refusal).
func TestProbeLeases(t *testing.T) {
	ms := startCluster(t, 1)
	held := startLone(t, "h", true)
	dialOf := func(m *Member) dialer { return m.feat.dial }
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	if err := probeLeases(ctx, dialOf(ms[0].m), held.m.adv); !errors.Is(err, peer.ErrRejected) {
		t.Fatalf("probe of a member that holds revision 2 back: %v, want ErrRejected", err)
	}
	if err := probeLeases(ctx, dialOf(held.m), ms[0].m.adv); err != nil {
		t.Fatalf("probe of a member that serves revision 2: %v", err)
	}
	nowhere := clustertest.FreePorts(t, 1)[0]
	if err := probeLeases(ctx, dialOf(ms[0].m), nowhere); err == nil || errors.Is(err, peer.ErrRejected) {
		t.Fatalf("probe of an address where nothing listens: %v, want an error that is no refusal", err)
	}
}
