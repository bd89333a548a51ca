package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
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
	for _, bad := range [][]string{{"--tls-cert", cert}, {"--tls-ca", ca}, {"--tls-cert", cert, "--tls-key", ca}, {"--http-tls"}} {
		args := append([]string{"server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, bad...)
		if code, out := run(t, nil, args...); code == 0 || !strings.Contains(out, "--tls") {
			t.Errorf("latch server %v: exit %d, %q; want a refusal naming the TLS flags", bad, code, out)
		}
	}
}

func TestClusterOverMutualTLS(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	ca, cert, key := testPKI(t, t.TempDir(), "cluster")
	// Mutual TLS is the peer credential; with it, admin calls need theirs.
	tc := startTestCluster(t, 3, "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, "--admin-secret-file", newTestSecrets(t).admin)
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

// TestClusterAdminOverHTTPS: with --http-tls, --tls-ca and --admin-tls-ca (and no secret),
// --http speaks only TLS, reads need no client certificate, admin calls need one the admin CA
// signed (a node's certificate, of the cluster CA, gets 403), and a node joins through an
// https:// --join with its own certificate as its credential.
func TestClusterAdminOverHTTPS(t *testing.T) {
	clustertest.Slow(t, "starts four processes")
	dir := t.TempDir()
	ca, cert, key := testPKI(t, dir, "cluster")
	_, otherCert, otherKey := testPKI(t, dir, "other")
	adminCA, adminCert, adminKey := testPKI(t, dir, "admin")
	tlsArgs := []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, "--http-tls", "--admin-tls-ca", adminCA}
	tc := startTestCluster(t, 3, tlsArgs...)
	l := tc.leader()
	f := (l + 1) % 3
	https := tc.procs[f].http
	if !strings.HasPrefix(https, "https://") {
		t.Fatalf("a node with --http-tls logged its --http as %q", https)
	}
	plain := strings.TrimPrefix(https, "https://")

	if code, out := run(t, nil, "status", "--http", https, "--tls-ca", ca); code != 0 || !strings.Contains(out, "role") {
		t.Fatalf("latch status over HTTPS: exit %d, %q", code, out)
	}
	if code, out := run(t, nil, "status", "--http", plain); code == 0 || !strings.Contains(out, "HTTPS") {
		t.Fatalf("latch status over plain HTTP to a TLS port: exit %d, %q; want a refusal naming HTTPS", code, out)
	}
	if code, out := run(t, nil, "status", "--http", https); code == 0 || !strings.Contains(out, "certificate") {
		t.Fatalf("latch status without --tls-ca (the system's roots do not know the test CA): exit %d, %q", code, out)
	}

	backup := filepath.Join(dir, "backup.snap")
	if code, out := run(t, nil, "snapshot", "save", "--http", https, "--tls-ca", ca, backup); code == 0 ||
		!strings.Contains(out, "401") || !strings.Contains(out, "client certificate") {
		t.Fatalf("snapshot save without a secret or a client certificate: exit %d, %q; want 401 naming the client certificate", code, out)
	}
	if code, out := run(t, nil, "snapshot", "save", "--http", https, "--tls-ca", ca, "--tls-cert", otherCert, "--tls-key", otherKey, backup); code == 0 {
		t.Fatalf("snapshot save with a certificate of another CA: exit 0, %q", out)
	}
	if _, err := os.Stat(backup); err == nil {
		t.Fatal("a refused backup left a file")
	}
	if code, out := run(t, nil, "snapshot", "save", "--http", https, "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key, backup); code == 0 ||
		!strings.Contains(out, "403") || !strings.Contains(out, "--admin-tls-ca") {
		t.Fatalf("snapshot save with a node's certificate (the cluster CA): exit %d, %q; want 403 naming --admin-tls-ca", code, out)
	}
	if code, out := run(t, nil, "snapshot", "save", "--http", https, "--tls-ca", ca, "--tls-cert", adminCert, "--tls-key", adminKey, backup); code != 0 {
		t.Fatalf("snapshot save with a client certificate of the admin CA: exit %d, %q", code, out)
	}
	if code, out := run(t, nil, "peers", "remove", "--http", https, "--tls-ca", ca, "--id", "nobody"); code == 0 || !strings.Contains(out, "401") {
		t.Fatalf("peers remove without a credential: exit %d, %q", code, out)
	}

	// A fourth node joins through the follower's https:// --http: no secret, so its own
	// certificate is what authorizes the change.
	n4 := clustertest.FreePorts(t, 1)[0]
	p4 := startServer(t, nil, append([]string{"--mode", "cluster", "--id", "n4", "--data-dir", filepath.Join(tc.dataDir, "n4"),
		"--raft-addr", n4, "--join", https}, tlsArgs...)...)
	tc.procs = append(tc.procs, p4)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out := run(t, nil, "peers", "list", "--http", https, "--tls-ca", ca)
		if strings.Contains(out, "n4") && strings.Count(out, " voter") == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n4 not a voter 30 s after it started with --join %s:\n%s", https, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, out := run(t, nil, "acquire", "--servers="+p4.listen, "--tls-ca", ca, "--json", "https/joined"); code != 0 || !strings.Contains(out, `"token":`) {
		t.Fatalf("acquire through the joined node: exit %d, %q", code, out)
	}
}
