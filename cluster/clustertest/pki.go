package clustertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	Pool *x509.CertPool // holds Cert: the roots to trust
}

var serial atomic.Int64

func certTemplate(name string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
}

// NewCA makes a CA called name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := certTemplate(name)
	tmpl.KeyUsage, tmpl.BasicConstraintsValid, tmpl.IsCA = x509.KeyUsageCertSign, true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, Pool: pool}
}

// Issue makes a certificate for 127.0.0.1 and the DNS name name, signed by ca, usable by a
// server and by a client.
func (ca *CA) Issue(t testing.TB, name string) tls.Certificate {
	t.Helper()
	return ca.IssueFor(t, name, []string{name}, []net.IP{net.IPv4(127, 0, 0, 1)},
		x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// IssueFor makes a certificate called name for the DNS names dns and the addresses ips with
// the extended key usages eku, signed by ca. Its Leaf is set.
func (ca *CA) IssueFor(t testing.TB, name string, dns []string, ips []net.IP, eku ...x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := certTemplate(name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage, tmpl.IPAddresses, tmpl.DNSNames = eku, ips, dns
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// Files issues a certificate called name and writes PEM files of the CA, the certificate and
// its key into dir, for processes that take file names (--tls-ca, --tls-cert, --tls-key).
func (ca *CA) Files(t testing.TB, dir, name string) (caFile, certFile, keyFile string) {
	t.Helper()
	return ca.write(t, ca.Issue(t, name), filepath.Join(dir, name+"-ca.pem"),
		filepath.Join(dir, name+"-cert.pem"), filepath.Join(dir, name+"-key.pem"))
}

// WriteSecret writes what a kubernetes.io/tls Secret with a CA holds (ca.crt, tls.crt,
// tls.key) for cert into dir, as a Secret volume shows it.
func (ca *CA) WriteSecret(t testing.TB, dir string, cert tls.Certificate) {
	t.Helper()
	ca.write(t, cert, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
}

// write writes PEM files of the CA, cert and cert's key, and returns their names.
func (ca *CA) write(t testing.TB, cert tls.Certificate, caFile, certFile, keyFile string) (string, string, string) {
	t.Helper()
	keyDER, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{
		caFile:   {Type: "CERTIFICATE", Bytes: ca.Cert.Raw},
		certFile: {Type: "CERTIFICATE", Bytes: cert.Certificate[0]},
		keyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}
