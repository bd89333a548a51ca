package main

import (
	"github.com/latchd/latch/cluster/clustertest"
	"strings"
	"testing"
)

// testPKI writes a CA and a certificate for 127.0.0.1 signed by it (usable as server and
// client certificate) into dir, and returns the file names.
func testPKI(t *testing.T, dir, name string) (ca, cert, key string) {
	t.Helper()
	return clustertest.NewCA(t, name+" test CA").Files(t, dir, name)
}

func TestClientPortTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, cert, key := testPKI(t, dir, "a")
	otherCA, _, _ := testPKI(t, dir, "b")
	p := startServer(t, nil, "--tls-cert", cert, "--tls-key", key)
	srv := "--servers=" + p.listen
	if code, out := run(t, nil, "acquire", srv, "--tls-ca", ca, "tls/key"); code != 0 || !strings.HasPrefix(out, "token 1") {
		t.Fatalf("acquire over TLS: exit %d, %q", code, out)
	}
	if code, out := run(t, nil, "acquire", srv, "--wait", "1s", "plain"); code == 0 {
		t.Fatalf("a plain client was served by a TLS port: %q", out)
	}
	if code, out := run(t, nil, "acquire", srv, "--wait", "1s", "--tls-ca", otherCA, "wrong-ca"); code == 0 {
		t.Fatalf("a client trusting another CA was served: %q", out)
	}
	// Through a port-forward the host dialled is not the certificate's name.
	if code, out := run(t, nil, "acquire", srv, "--tls-ca", ca, "--tls-server-name", "a", "tls/named"); code != 0 {
		t.Fatalf("acquire with --tls-server-name matching the certificate: exit %d, %q", code, out)
	}
	if code, out := run(t, nil, "acquire", srv, "--wait", "1s", "--tls-ca", ca, "--tls-server-name", "not-a", "tls/misnamed"); code == 0 {
		t.Fatalf("a certificate not naming --tls-server-name was accepted: %q", out)
	}
	for _, bad := range [][]string{{"--tls-cert", cert}, {"--tls-ca", ca}, {"--tls-cert", cert, "--tls-key", ca}} {
		args := append([]string{"server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, bad...)
		if code, out := run(t, nil, args...); code == 0 || !strings.Contains(out, "--tls") {
			t.Errorf("latch server %v: exit %d, %q; want a refusal naming the TLS flags", bad, code, out)
		}
	}
}

func TestClusterOverMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes; skipped with -short")
	}
	t.Parallel()
	ca, cert, key := testPKI(t, t.TempDir(), "cluster")
	tc := startTestCluster(t, 3, "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca)
	l := tc.leader()
	f := (l + 1) % 3
	code, out := run(t, nil, "acquire", "--servers="+tc.procs[f].listen, "--tls-ca", ca, "--json", "mtls/key")
	if code != 0 || !strings.Contains(out, `"token":`) {
		t.Fatalf("acquire through a follower (forwarded over mutual TLS): exit %d, %q", code, out)
	}
	if !strings.Contains(tc.procs[l].stderr.String(), `"peer_mtls":true`) {
		t.Fatal("the leader did not report mutual TLS between peers")
	}
}
