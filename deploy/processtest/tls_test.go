package processtest

import (
	"crypto/x509"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/latchd/latch/deploy/internal/testpki"
)

// writeTLSSecret writes what the Secret latch-tls holds (ca.crt, tls.crt, tls.key) into dir:
// one certificate for every pod and the Services, for server and client auth, as the
// cert-manager example issues it; here with the loopback addresses the names map to.
func writeTLSSecret(t *testing.T, dir string) {
	t.Helper()
	ips := []net.IP{net.ParseIP(serviceIP)}
	for i := range 5 {
		ips = append(ips, net.ParseIP(podIP(i)))
	}
	ca := testpki.NewCA(t)
	ca.WriteSecret(t, dir, ca.Issue(t, []string{"latch", "*.latch-peers"}, ips, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth))
}

// TestStatefulSetTLS: the pods of the TLS example (the base plus the tls component) form a
// cluster over mutual TLS with the Secret latch-tls mounted, and serve clients over TLS only.
func TestStatefulSetTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three latch processes; skipped with -short")
	}
	s := newStatefulSetOf(t, "../k8s/examples/tls")
	tlsDir := t.TempDir()
	writeTLSSecret(t, tlsDir)
	s.mounts["/etc/latch/tls"] = tlsDir
	pods := replicas(t, "../k8s/examples/tls")
	s.start(pods...)
	s.allReady()
	for _, i := range pods {
		if l := s.pods[i].log.String(); !strings.Contains(l, `"peer_mtls":true`) || !strings.Contains(l, `"tls":true`) {
			t.Fatalf("latch-%d does not serve TLS with mutual TLS between peers:\n%s", i, l)
		}
	}
	if code, out := s.latch("acquire", "--wait", "0", "tls/plain"); code == 0 {
		t.Fatalf("a plaintext client got a lock from a TLS port: %q", out)
	}
	s.env = []string{"LATCH_TLS_CA=" + filepath.Join(tlsDir, "ca.crt")}
	first := s.acquire("tls/a")
	if second := s.acquire("tls/b"); second <= first {
		t.Fatalf("tokens %d then %d", first, second)
	}
	if n := s.voters(); n != len(pods) {
		t.Fatalf("%d voters, want %d", n, len(pods))
	}
}
