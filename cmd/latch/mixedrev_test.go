package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Protocol revision 2 across nodes of two builds, as real processes (mixed_test.go has the
// workloads): the forward channel of revision 2 and its fallback, the cluster's one-way
// feature switch, and what a client of this build meets before and after it.

// switchBound bounds the wait for the feature switch once every node runs this build: the
// leader asks every few seconds, plus an election and a commit. Generous: -race on a busy
// two-core machine.
const switchBound = 45 * time.Second

// featuresOf is the part of /v1/status that says which of the cluster's features are on.
// A node of the previous build has no "features": it reads as all off.
type featuresOf struct {
	Features struct {
		Leases bool `json:"leases"`
	} `json:"features"`
}

// leases asks node i whether the cluster's switch for revision 2 is on in its applied log.
func (tc *testCluster) leases(i int) (bool, error) {
	code, body := httpGetQuiet(tc.procs[i].http + "/v1/status")
	if code != 200 {
		return false, fmt.Errorf("n%d /v1/status: HTTP %d %.200s", i+1, code, body)
	}
	var st featuresOf
	err := json.Unmarshal([]byte(body), &st)
	return st.Features.Leases, err
}

// expectLeasesOff fails the test if any node that answers reports the switch on.
func (tc *testCluster) expectLeasesOff(when string) {
	tc.t.Helper()
	for i := range tc.procs {
		if on, err := tc.leases(i); err == nil && on {
			tc.t.Fatalf("%s: n%d (%s) reports revision 2 switched on", when, i+1, tc.procs[i].version())
		}
	}
}

// awaitLeasesOn waits until every node reports the switch on.
func (tc *testCluster) awaitLeasesOn() {
	tc.t.Helper()
	clustertest.Eventually(tc.t, switchBound, "revision 2 switched on at every node", func() bool {
		for i := range tc.procs {
			if on, err := tc.leases(i); err != nil || !on {
				return false
			}
		}
		return true
	})
}

// newGoClient is this build's client, which offers revision 2, on the one server addr.
func newGoClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Servers: []string{addr}, Secret: []byte(clientSecretValue)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// expectLatch1 checks, at node i, what a client of this build meets while the switch is
// off: a hello that offers revision 2 gets no echo (so no G can ever come on that
// connection, and a raw latch/1 reader reads an A), and the official client gets grants and
// releases, carries no revised connection and answers Extend with ErrUnsupported, sending
// nothing.
func (tc *testCluster) expectLatch1(i int) {
	t := tc.t
	t.Helper()
	p := tc.procs[i]
	c := wiretest.Dial(t, p.listen)
	defer c.Close()
	cn, _ := wire.NewNonce()
	c.Send(t, wiretest.Hello(wire.Version, wire.FlagLeases, cn))
	h := c.Next(t)
	if h.Op != wire.OpHello || h.Hello.Flags&wire.FlagLeases != 0 {
		t.Fatalf("n%d (%s) answers an offer of revision 2 with %s while the switch is off; want no echo", i+1, p.version(), wiretest.Describe(h))
	}
	c.Send(t, wiretest.Proof(wire.ClientProof([]byte(clientSecretValue), cn, h.Hello.Nonce)))
	c.ExpectOp(t, wire.OpProof, 0)
	key := fmt.Sprintf("latch1/n%d/%d", i+1, time.Now().UnixNano())
	if r := c.Do(t, wiretest.Acquire(1, 5, 30, key)); r.Op != wire.OpAcquire {
		t.Fatalf("n%d: raw acquire: %s, want A", i+1, wiretest.Describe(r))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := newGoClient(t, p.listen)
	tk, err := cl.Acquire(ctx, key+"/go", 0, client.AcquireOptions{Wait: 5 * time.Second, Lease: 30 * time.Second})
	if err != nil {
		t.Fatalf("n%d (%s): acquire: %v", i+1, p.version(), err)
	}
	if err := tk.Extend(ctx, time.Minute); !errors.Is(err, client.ErrUnsupported) {
		t.Fatalf("n%d (%s): extend while the switch is off: %v, want ErrUnsupported", i+1, p.version(), err)
	}
	if err := tk.Release(ctx); err != nil {
		t.Fatalf("n%d (%s): release: %v", i+1, p.version(), err)
	}
	if st := cl.Stats(); st.ConnsRevised != 0 || st.Connects == 0 {
		t.Fatalf("n%d (%s): client stats %+v: want connections, none of revision 2", i+1, p.version(), st)
	}
}

// expectExtends checks, at node i, that once the switch is on the official client's
// connection carries revision 2 and an extend succeeds and is relayed as definite (through a
// follower it goes over the revised forward channel to the leader).
func (tc *testCluster) expectExtends(i int) {
	t := tc.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := newGoClient(t, tc.procs[i].listen)
	tk, err := cl.Acquire(ctx, fmt.Sprintf("revised/n%d/%d", i+1, time.Now().UnixNano()), 0, client.AcquireOptions{Wait: 5 * time.Second, Lease: 10 * time.Second})
	if err != nil {
		t.Fatalf("n%d: acquire: %v", i+1, err)
	}
	if err := tk.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("n%d: extend with the switch on: %v", i+1, err)
	}
	if left := time.Until(tk.CurrentDeadline()); left < 30*time.Second {
		t.Fatalf("n%d: %v left after an extend to 1 min; want the new lease counted", i+1, left)
	}
	if err := tk.Release(ctx); err != nil {
		t.Fatalf("n%d: release: %v", i+1, err)
	}
	if st := cl.Stats(); st.ConnsRevised == 0 || st.Extended != 1 {
		t.Fatalf("n%d: client stats %+v: want a connection of revision 2 and one extend", i+1, st)
	}
}

// peerConfig is a peer.Config that proves the test's peer secret and states identity id
// ("": none, handshake version 1).
func peerConfig(id string) peer.Config {
	cfg := peer.DefaultConfig()
	cfg.Secrets = [][]byte{[]byte(peerSecretValue)}
	if id != "" {
		cfg.ID, cfg.Advertise = id, "127.0.0.1:1"
	}
	return cfg
}

// How the previous build's peer port refuses a channel byte it does not know, on the real
// binary: the revised forward channel gets the reject verdict (peer.ErrRejected), with an
// identity stated or not, and DialFallback then takes the latch/1 forward channel, where a
// ping is answered. This build's peer port takes the revised channel.
func TestPreviousPeerPortRefusesTheRevisedChannel(t *testing.T) {
	clustertest.Slow(t, "builds the previous latch and starts two servers")
	prev, _ := prevLatch(t)
	sec := newTestSecrets(t)
	for _, build := range []struct {
		name, bin string
		want      byte
	}{{"previous build", prev, peer.ChannelForward}, {"this build", "", peer.ChannelForwardLeases}} {
		t.Run(build.name, func(t *testing.T) {
			addr := clustertest.FreePorts(t, 1)[0]
			startServerOf(t, build.bin, nil, append([]string{"--mode", "cluster", "--id", "n1", "--bootstrap",
				"--data-dir", filepath.Join(t.TempDir(), "n1"), "--raft-addr", addr}, sec.serverArgs()...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			for _, cfg := range []peer.Config{peerConfig("n9"), peerConfig("")} {
				nc, err := peer.Dial(ctx, addr, peer.ChannelForwardLeases, cfg)
				if build.want == peer.ChannelForward && !errors.Is(err, peer.ErrRejected) {
					t.Fatalf("dial of the revised forward channel (identity %q): %v, want ErrRejected", cfg.ID, err)
				}
				if err == nil {
					nc.Close()
				}
				nc, ch, err := peer.DialFallback(ctx, addr, peer.ChannelForwardLeases, peer.ChannelForward, cfg)
				if err != nil || ch != build.want {
					t.Fatalf("DialFallback (identity %q): channel %q, %v; want %q", cfg.ID, ch, err, build.want)
				}
				pingOn(t, nc, ch == peer.ChannelForwardLeases)
			}
		})
	}
}

// pingOn pings on a forward channel connection (its sessions start ready) and closes it.
func pingOn(t *testing.T, nc net.Conn, revised bool) {
	t.Helper()
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(wiretest.Ping(7)); err != nil {
		t.Fatal(err)
	}
	dec := wire.NewResponseDecoder()
	if revised {
		dec.SetFlags(wire.FlagLeases)
	}
	buf := make([]byte, 64)
	n, err := nc.Read(buf)
	if err != nil {
		t.Fatalf("ping on the forward channel: %v", err)
	}
	if _, done, err := dec.Decode(buf[:n]); err != nil || !done || dec.Response().Op != wire.OpPing || dec.Response().Owner != 7 {
		t.Fatalf("ping on the forward channel: % x (%v), want P for owner 7", buf[:n], err)
	}
}

// Once every node of this build has switched revision 2 on, a node of the previous build
// cannot join: its --join is refused, and so is latch peers add of its address, with a
// message that says why; it never enters the configuration, and the cluster serves on.
func TestOldNodeCannotJoinOnceSwitchedOn(t *testing.T) {
	clustertest.Slow(t, "builds the previous latch and starts four servers")
	prev, _ := prevLatch(t)
	tc, sec, _ := startMixedCluster(t, []string{"", "", ""})
	l, _ := tc.agreed(mixedRecovery)
	tc.awaitLeasesOn()
	if n := strings.Count(tc.procs[l].stderr.String(), "protocol revision 2 switched on for the cluster"); n != 1 {
		t.Errorf("the leader logged the switch %d times, want once", n)
	}
	f := (l + 1) % 3

	addr := clustertest.FreePorts(t, 1)[0]
	old := startServerOf(t, prev, nil, append([]string{"--mode", "cluster", "--id", "n4",
		"--data-dir", filepath.Join(tc.dataDir, "n4"), "--raft-addr", addr, "--join", tc.procs[f].http}, sec.serverArgs()...)...)
	clustertest.Eventually(t, 30*time.Second, "the old node's join refused", func() bool {
		return strings.Contains(old.stderr.String(), "does not serve it")
	})
	code, out := run(t, nil, "peers", "add", "--http", tc.procs[f].http, "--id", "n4", "--raft-addr", addr, "--admin-secret-file", sec.admin)
	if code == 0 || !strings.Contains(out, "400") || !strings.Contains(out, "does not serve it") {
		t.Fatalf("latch peers add of the old node: exit %d, %q; want 400, saying why", code, out)
	}
	code, out = run(t, nil, "peers", "list", "--http", tc.procs[l].http)
	if code != 0 || strings.Contains(out, "n4") {
		t.Fatalf("peers list: exit %d, %q; want no n4", code, out)
	}
	tc.expectExtends(f)
	tc.expectExtends(l)
}

// expectRevisionLogs checks the logs of this build's nodes in a cluster of two builds: a
// follower whose leader runs the previous build forwards over the latch/1 forward channel,
// a leader of this build says why the switch stays off, and none switched it on.
func (tc *testCluster) expectRevisionLogs() {
	tc.t.Helper()
	l := tc.leader()
	for i, p := range tc.procs {
		if tc.bins[i] != "" {
			continue
		}
		log := p.stderr.String()
		switch {
		case i == l && !strings.Contains(log, "protocol revision 2 stays off until every server of the cluster serves it"):
			tc.t.Errorf("n%d, the leader of this build, never said why revision 2 stays off", i+1)
		case i != l && tc.bins[l] != "" && !strings.Contains(log, "forward connection opened in latch/1"):
			tc.t.Errorf("n%d, a follower of this build, never forwarded in latch/1 to the previous leader", i+1)
		}
		if strings.Contains(log, "switched on for the cluster") {
			tc.t.Errorf("n%d switched revision 2 on in a cluster of two builds", i+1)
		}
	}
}
