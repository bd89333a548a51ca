package creds

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/clustertest"
)

func TestKeyFileModes(t *testing.T) {
	for _, c := range []struct {
		perm     os.FileMode
		mine     bool
		refused  bool
		warnings int
	}{
		{0o600, true, false, 0},
		{0o400, true, false, 0},
		{0o640, true, false, 1},  // the group reads a file this process owns: more than it needs
		{0o440, false, false, 0}, // a Kubernetes Secret volume: root-owned, read through fsGroup
		{0o644, false, false, 1}, // anyone reads it
		{0o620, true, true, 0},
		{0o602, true, true, 0},
		{0o666, false, true, 0},
	} {
		var log strings.Builder
		logger := hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Warn})
		err := CheckKeyMode("secret-file", "/etc/latch/secret", c.perm, c.mine, logger)
		if c.refused != (err != nil) || c.refused && (!errors.Is(err, ErrKeyFileWritable) || !strings.Contains(err.Error(), "chmod 600 /etc/latch/secret") ||
			!strings.Contains(err.Error(), "--secret-file")) {
			t.Errorf("mode %04o: %v; refused %v, want an error naming the flag, the file and chmod 600", c.perm, err, c.refused)
		}
		if n := strings.Count(log.String(), "readable by others"); n != c.warnings || n > 0 && !strings.Contains(log.String(), "chmod 600") {
			t.Errorf("mode %04o: %d warnings, want %d naming the fix:\n%s", c.perm, n, c.warnings, log.String())
		}
	}
}

// LoadSecrets reads each principal's file, refuses a secret two of them share unless told
// it is deliberate (then warns); a file others may write is refused, naming its flag.
func TestLoadSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, perm os.FileMode, lines ...string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, perm); err != nil {
			t.Fatal(err)
		}
		return f
	}
	c, p, a := strings.Repeat("c", 40), strings.Repeat("p", 40), strings.Repeat("a", 40)
	var log strings.Builder
	logger := hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Warn})
	files := SecretFiles{Client: write("client", 0o600, c), Peer: write("peer", 0o600, p, c), Admin: write("admin", 0o600, a)}
	if _, err := LoadSecrets(files, logger); !errors.Is(err, ErrSharedSecret) || !strings.Contains(err.Error(), "--secret-file and --peer-secret-file") ||
		!strings.Contains(err.Error(), "--allow-shared-secrets") {
		t.Fatalf("a secret in two files: %v, want ErrSharedSecret naming both flags and the way out", err)
	}
	files.AllowShared = true
	s, err := LoadSecrets(files, logger)
	if err != nil || len(s.Client) != 1 || len(s.Peer) != 2 || len(s.Admin) != 1 || string(s.Peer[0]) != p {
		t.Fatalf("LoadSecrets: %+v, %v", s, err)
	}
	if n := strings.Count(log.String(), "a secret is in two secret files"); n != 1 || !strings.Contains(log.String(), "--secret-file --peer-secret-file") {
		t.Fatalf("%d warnings about a shared secret, want one naming both files:\n%s", n, log.String())
	}
	if s, err := LoadSecrets(SecretFiles{}, logger); err != nil || s.Client != nil || s.Peer != nil || s.Admin != nil {
		t.Fatalf("no files: %+v, %v; want no secrets", s, err)
	}
	_, err = LoadSecrets(SecretFiles{Admin: write("open", 0o666, a)}, logger)
	if !errors.Is(err, ErrKeyFileWritable) || !strings.Contains(err.Error(), "--admin-secret-file") {
		t.Fatalf("a writable admin file: %v, want ErrKeyFileWritable naming --admin-secret-file", err)
	}
}

// LoadTLS refuses flags that need others before it reads a file, naming them.
func TestLoadTLSNeeds(t *testing.T) {
	for _, c := range []struct {
		files TLSFiles
		want  string
	}{
		{TLSFiles{AdminCA: "ca.pem"}, "--admin-tls-ca needs --http-tls"},
		{TLSFiles{CA: "ca.pem"}, "--tls-ca needs --tls-cert and --tls-key"},
		{TLSFiles{HTTPTLS: true}, "--http-tls needs --tls-cert and --tls-key"},
		{TLSFiles{Cert: "cert.pem"}, "--tls-cert and --tls-key go together"},
	} {
		if _, err := LoadTLS(c.files, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.files, err, c.want)
		}
	}
	if got, err := LoadTLS(TLSFiles{}, nil); err != nil || got.Client != nil || got.HTTP != nil || got.Peer != nil {
		t.Fatalf("no TLS files: %+v, %v; want plain ports", got, err)
	}
}

// With every TLS file, each port gets its configuration: the client port the certificate,
// the peer port mutual TLS of the CA, --http-tls the certificate and the verification of a
// client certificate of either CA.
func TestLoadTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := clustertest.NewCA(t, "cluster CA").Files(t, dir, "node")
	adminCA, _, _ := clustertest.NewCA(t, "admin CA").Files(t, dir, "admin")
	got, err := LoadTLS(TLSFiles{Cert: cert, Key: key, CA: ca, HTTPTLS: true, AdminCA: adminCA}, nil)
	if err != nil {
		t.Fatalf("LoadTLS: %v", err)
	}
	if got.Client == nil || got.Peer == nil || got.Dial == nil || got.HTTP == nil || got.PeerCAs == nil || got.AdminCAs == nil ||
		got.Admin == nil || got.Admin.RootCAs == nil || got.HTTP.ClientAuth != tls.VerifyClientCertIfGiven {
		t.Fatalf("LoadTLS: %+v, want every configuration", got)
	}
	if _, err := LoadTLS(TLSFiles{Cert: cert, Key: key, CA: key}, nil); err == nil || !strings.Contains(err.Error(), "--tls-ca") {
		t.Fatalf("a CA file with no certificate: %v, want an error naming --tls-ca", err)
	}
}

// The CLI's TLS: no CA is plain TCP for the client verbs; a CA verifies the servers for
// ServerName; the admin verbs present a client certificate when given one.
func TestDialTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := clustertest.NewCA(t, "cluster CA").Files(t, dir, "node")
	if got, err := ClientTLS(DialFiles{ServerName: "x"}); got != nil || err != nil {
		t.Fatalf("no CA: %v, %v; want plain TCP", got, err)
	}
	got, err := ClientTLS(DialFiles{CA: ca, ServerName: "n", Cert: cert, Key: key})
	if err != nil || got.RootCAs == nil || got.ServerName != "n" || len(got.Certificates) != 0 {
		t.Fatalf("client verbs: %+v, %v; want the CA and the name, no client certificate", got, err)
	}
	got, err = AdminTLS(DialFiles{Cert: cert, Key: key})
	if err != nil || got.RootCAs != nil || len(got.Certificates) != 1 {
		t.Fatalf("admin verbs: %+v, %v; want the system roots and the client certificate", got, err)
	}
	if _, err := AdminTLS(DialFiles{CA: filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "--tls-ca") {
		t.Fatalf("a missing CA: %v, want an error naming --tls-ca", err)
	}
}
