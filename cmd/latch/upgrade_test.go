package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// TestFromOneSecretToThree follows deploy/README.md, "From one secret to three", on a running
// three-node cluster: it starts with one secret S for everything (on the wire what a node
// with only --secret-file did before peers and operators had their own), then rolls the
// nodes one at a time three times:
//
//	roll 1: --peer-secret-file [S, P]  --admin-secret-file [A, S]   (talks to nodes on S alone)
//	roll 2: --peer-secret-file [P, S]  --admin-secret-file [A]
//	roll 3: --peer-secret-file [P]                                   (without --allow-shared-secrets)
//
// Clients keep S throughout. After every restart the cluster has a leader, every node
// serves, and a lock taken at the start is still held; at the end S opens the client port
// only.
func TestFromOneSecretToThree(t *testing.T) {
	clustertest.Slow(t, "starts three processes and restarts them nine times")
	dir := t.TempDir()
	S, P, A := strings.Repeat("s", 40), strings.Repeat("p", 40), strings.Repeat("a", 40)
	client := writeSecretFile(t, dir, "client", S)
	one := []string{"--secret-file", client, "--peer-secret-file", client, "--admin-secret-file", client, "--allow-shared-secrets"}
	tc := startTestCluster(t, 3, one...)
	l := tc.leader()
	if !strings.Contains(tc.procs[l].stderr.String(), "a secret is in two secret files") {
		t.Fatalf("one secret for every principal, and no warning:\n%s", tc.procs[l].stderr.String())
	}
	c := wiretest.Dial(t, tc.procs[l].listen)
	c.Hello(t, []byte(S))
	held := c.Do(t, wiretest.Acquire(1, 0, 3600, "upgrade/held")).Token
	if held == 0 {
		t.Fatal("no grant before the upgrade")
	}
	c.Close()

	adminFinal := writeSecretFile(t, dir, "admin-2", A)
	rolls := [][]string{
		{"--secret-file", client, "--peer-secret-file", writeSecretFile(t, dir, "peer-1", S, P), "--admin-secret-file", writeSecretFile(t, dir, "admin-1", A, S), "--allow-shared-secrets"},
		{"--secret-file", client, "--peer-secret-file", writeSecretFile(t, dir, "peer-2", P, S), "--admin-secret-file", adminFinal, "--allow-shared-secrets"},
		{"--secret-file", client, "--peer-secret-file", writeSecretFile(t, dir, "peer-3", P), "--admin-secret-file", adminFinal},
	}
	for r, flags := range rolls {
		for i := range tc.procs {
			tc.procs[i].stop(t, fmt.Sprintf("roll %d, n%d", r+1, i+1))
			tc.args[i] = append(tc.args[i][:len(tc.args[i])-len(one)], flags...)
			tc.procs[i] = startServer(t, nil, tc.args[i]...)
			tc.leader()
			for j, p := range tc.procs { // every node serves, forwarding over the peer port
				c := wiretest.Dial(t, p.listen)
				c.Hello(t, []byte(S))
				c.Raw(t, wiretest.Acquire(2, 0, 30, "upgrade/held"))
				if resp := c.Next(t); resp.Op != wire.OpTimeout {
					t.Fatalf("roll %d after restarting n%d: n%d answers %s for the held lock, want it still held", r+1, i+1, j+1, wiretest.Describe(resp))
				}
				c.Close()
			}
		}
	}

	// S opens the client port only; P the peer port; A the admin calls.
	refusedOnClientPort(t, tc.procs[0].listen, []byte(P))
	for i, addr := range tc.raft {
		if err := peerDialErr(addr, peer.ChannelAdmin, []byte(S)); !errors.Is(err, peer.ErrRejected) {
			t.Errorf("the old shared secret on n%d's peer port after the upgrade: %v, want ErrRejected", i+1, err)
		}
	}
	if code, body := signCall(t, tc.procs[0].http, []byte(S), http.MethodGet, "/v1/snapshot", nil).send(t, tc.procs[0].http); code != 401 {
		t.Fatalf("the old shared secret on an admin call after the upgrade: %d %s", code, body)
	}
	if code, body := signCall(t, tc.procs[0].http, []byte(A), http.MethodGet, "/v1/snapshot", nil).send(t, tc.procs[0].http); code != 200 {
		t.Fatalf("the admin secret after the upgrade: %d %.200s", code, body)
	}
	if out := tc.procs[0].stderr.String(); strings.Contains(out, "a secret is in two secret files") {
		t.Fatal("still a warning about a shared secret after the upgrade")
	}
	t.Logf("token %d held throughout three rolls", held)
}
