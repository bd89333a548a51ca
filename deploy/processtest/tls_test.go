package processtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTLSSecret writes what the Secret latch-tls holds (ca.crt, tls.crt, tls.key) into dir:
// one certificate for every pod and the Services, for server and client auth, as the
// cert-manager example issues it; here with the loopback addresses the names map to.
func writeTLSSecret(t *testing.T, dir string) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "latch test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ips := []net.IP{net.ParseIP(serviceIP)}
	for i := range 5 {
		ips = append(ips, net.ParseIP(podIP(i)))
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "latch"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), DNSNames: []string{"latch", "*.latch-peers"}, IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		"ca.crt":  {Type: "CERTIFICATE", Bytes: caDER},
		"tls.crt": {Type: "CERTIFICATE", Bytes: der},
		"tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
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
