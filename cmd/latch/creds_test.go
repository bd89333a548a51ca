package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The three secrets of a test cluster: each principal its own.
var (
	clientSecretValue = strings.Repeat("c", 40)
	peerSecretValue   = strings.Repeat("p", 40)
	adminSecretValue  = strings.Repeat("a", 40)
)

// testSecrets are the files of one test's three secrets.
type testSecrets struct{ client, peer, admin string }

// newTestSecrets writes the client, peer and admin secret files (mode 0600) into a
// temporary directory.
func newTestSecrets(t *testing.T) testSecrets {
	t.Helper()
	dir := t.TempDir()
	return testSecrets{
		client: writeSecretFile(t, dir, "client", clientSecretValue),
		peer:   writeSecretFile(t, dir, "peer", peerSecretValue),
		admin:  writeSecretFile(t, dir, "admin", adminSecretValue),
	}
}

// writeSecretFile writes lines (one secret each) to dir/name, mode 0600.
func writeSecretFile(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// serverArgs are the server flags that give a node the three secrets.
func (s testSecrets) serverArgs() []string {
	return []string{"--secret-file", s.client, "--peer-secret-file", s.peer, "--admin-secret-file", s.admin}
}

// A cluster node with some credentials but not the peer's or the admin's refuses to start,
// naming the flag that is missing (member.Config.Validate's principal rule, through the
// binary).
func TestClusterNodeNeedsEveryPrincipalsCredential(t *testing.T) {
	s := newTestSecrets(t)
	dir := t.TempDir()
	base := []string{"server", "--mode", "cluster", "--id", "n1", "--data-dir", filepath.Join(dir, "data"), "--bootstrap",
		"--listen", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--http", "127.0.0.1:0"}
	for _, c := range []struct {
		name, want string
		creds      []string
	}{
		{"client only", "--peer-secret-file", []string{"--secret-file", s.client}},
		{"client and peer", "--admin-secret-file", []string{"--secret-file", s.client, "--peer-secret-file", s.peer}},
	} {
		code, out := run(t, nil, append(append([]string(nil), base...), c.creds...)...)
		if code == 0 || !strings.Contains(out, "needs its own credential") && !strings.Contains(out, "need their own credential") || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want a refusal naming %s:\n%s", c.name, code, c.want, out)
		}
	}
}
