package processtest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

const tlsExample = "../k8s/examples/tls"

// writeTLSSecret writes what the Secret latch-tls holds (ca.crt, tls.crt, tls.key) into dir:
// one certificate for every pod and the Services, for server and client auth, as the
// cert-manager example issues it; here with the loopback addresses the names map to (the
// pods' args dial the Service latch, https://latch:7402 included, at serviceIP).
func writeTLSSecret(t *testing.T, dir string) {
	t.Helper()
	ips := []net.IP{net.ParseIP(serviceIP)}
	for i := range 5 {
		ips = append(ips, net.ParseIP(podIP(i)))
	}
	ca := clustertest.NewCA(t, "latch test CA")
	ca.WriteSecret(t, dir, ca.IssueFor(t, "latch", []string{"latch", "*.latch-peers"}, ips, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth))
}

// useHTTPS makes the probes and metrics reads of s use HTTPS, trusting the CA in caFile and
// presenting no client certificate, as the kubelet and Prometheus do with --http-tls.
func (s *statefulSet) useHTTPS(caFile string) {
	s.t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		s.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		s.t.Fatalf("%s holds no certificate", caFile)
	}
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	s.mu.Lock()
	s.probe.scheme, s.probe.client = "https", c
	s.mu.Unlock()
}

// TestStatefulSetTLS: the pods of the TLS example (the base plus the tls component) form a
// cluster over mutual TLS with the Secret latch-tls mounted, and serve clients and their http
// port (probes, metrics, admin API) over TLS only. Over the client Service: latch status needs
// https:// and the CA; a backup needs the admin secret (a pod's certificate gets 403).
// Scaled to five, the new pods join through --join https://latch:7402 (the peer secret signs
// the join).
func TestStatefulSetTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five latch processes; skipped with -short")
	}
	s := newStatefulSetOf(t, tlsExample)
	tlsDir := t.TempDir()
	writeTLSSecret(t, tlsDir)
	s.mounts["/etc/latch/tls"] = tlsDir
	caFile, certFile, keyFile := filepath.Join(tlsDir, "ca.crt"), filepath.Join(tlsDir, "tls.crt"), filepath.Join(tlsDir, "tls.key")
	s.useHTTPS(caFile)
	args := s.podArgs(0)
	if j := slices.Index(args, "--join"); j < 0 || j+1 >= len(args) || args[j+1] != "https://"+serviceIP+":7402" || !slices.Contains(args, "--http-tls") {
		t.Fatalf("pod args %q: want --http-tls and --join https://%s:7402 (the Service latch)", args, serviceIP)
	}

	pods := replicas(t, tlsExample)
	s.start(pods...)
	s.allReady() // /readyz over HTTPS, as the probes (scheme: HTTPS) ask it
	for _, i := range pods {
		if l := s.pods[i].log.String(); !strings.Contains(l, `"peer_mtls":true`) || !strings.Contains(l, `"tls":true`) || !strings.Contains(l, `"http_tls":true`) {
			t.Fatalf("latch-%d does not serve TLS on the client and http ports with mutual TLS between peers:\n%s", i, l)
		}
	}
	if code, body, err := s.get(0, "/metrics"); err != nil || code != http.StatusOK || !strings.Contains(string(body), "\nlatch_raft_voters 3\n") {
		t.Fatalf("GET https /metrics: %d, %v, want 200 with latch_raft_voters 3:\n%.500s", code, err, body)
	}
	// A probe left on scheme HTTP would fail: the port answers plain HTTP with 400.
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + podIP(0) + ":7402/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Client sent an HTTP request to an HTTPS server") {
		t.Fatalf("plain HTTP /healthz on a --http-tls port: %s %q, want 400 Client sent an HTTP request to an HTTPS server", resp.Status, body)
	}
	if code, out := s.latch("acquire", "--wait", "0", "tls/plain"); code == 0 {
		t.Fatalf("a plaintext client got a lock from a TLS port: %q", out)
	}

	s.env = []string{"LATCH_TLS_CA=" + caFile, "LATCH_HTTP=https://" + serviceIP + ":7402"}
	first := s.acquire("tls/a")
	if second := s.acquire("tls/b"); second <= first {
		t.Fatalf("tokens %d then %d", first, second)
	}
	if n := s.voters(); n != len(pods) {
		t.Fatalf("%d voters, want %d", n, len(pods))
	}

	// latch status through the Service: https:// with the CA, for the Service's address or
	// (--tls-server-name) its name; not without the CA, and not over plain HTTP.
	for _, extra := range [][]string{nil, {"--tls-server-name", "latch"}} {
		if code, out := s.latch(append([]string{"status", "--http", "https://" + serviceIP + ":7402"}, extra...)...); code != 0 ||
			!strings.Contains(out, "leader ") || !strings.Contains(out, "last token") {
			t.Fatalf("latch status --http https://%s:7402 %q: exit %d, %q", serviceIP, extra, code, out)
		}
	}
	if code, out := s.latchEnv([]string{"LATCH_TLS_CA"}, "status"); code == 0 || !strings.Contains(out, "unknown authority") {
		t.Fatalf("latch status over https without --tls-ca: exit %d, %q; want refused (unknown authority)", code, out)
	}
	if code, out := s.latch("status", "--http", serviceIP+":7402"); code == 0 || !strings.Contains(out, "Client sent an HTTP request to an HTTPS server") {
		t.Fatalf("latch status --http %s:7402 (plain HTTP): exit %d, %q; want 400 Client sent an HTTP request to an HTTPS server", serviceIP, code, out)
	}

	// A backup needs the admin secret: the pod certificate (signed by the cluster CA) is a
	// peer's credential, which lets a node join and nothing more (403); with neither, 401.
	backup := filepath.Join(t.TempDir(), "latch.snap")
	noSecret := []string{"LATCH_ADMIN_SECRET_FILE"}
	if code, out := s.latch("snapshot", "save", backup); code != 0 || !strings.Contains(out, "2 held keys") {
		t.Fatalf("snapshot save with the admin secret: exit %d, %q", code, out)
	}
	denied := backup + ".denied"
	if code, out := s.latchEnv(append(noSecret, "LATCH_TLS_CERT="+certFile, "LATCH_TLS_KEY="+keyFile), "snapshot", "save", denied); code == 0 ||
		!strings.Contains(out, "403") {
		t.Fatalf("snapshot save with a pod certificate, without --admin-secret-file: exit %d, %q; want 403", code, out)
	}
	if code, out := s.latchEnv(noSecret, "snapshot", "save", denied); code == 0 || !strings.Contains(out, "401") {
		t.Fatalf("snapshot save with neither the admin secret nor a client certificate: exit %d, %q; want 401", code, out)
	}
	if _, err := os.Stat(denied); !os.IsNotExist(err) {
		t.Fatalf("a refused backup left %s: %v", denied, err)
	}

	// Scale to five: latch-3 and latch-4 are not initial members, so they ask the cluster
	// behind --join https://latch:7402 (the Service) to add them, over TLS.
	s.start(3, 4)
	s.waitFor("five voters", func() bool { return s.voters() == 5 })
	s.allReady()
	for _, i := range []int{3, 4} {
		s.waitFor(fmt.Sprintf("latch-%d logs that it joined", i), func() bool {
			return strings.Contains(s.pods[i].log.String(), "joined the cluster")
		})
		if l := s.pods[i].log.String(); !strings.Contains(l, "added to the cluster as a nonvoter") ||
			!strings.Contains(l, `"via":"https://`+serviceIP+`:7402"`) || strings.Contains(l, "bootstrapping a new cluster") {
			t.Fatalf("latch-%d did not join through --join https://%s:7402:\n%s", i, serviceIP, l)
		}
	}
	if third := s.acquire("tls/c"); third <= first {
		t.Fatalf("token %d after scaling, not above %d", third, first)
	}
}
