package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
)

// selfSigned returns a server TLS config for 127.0.0.1 and a client config that trusts it.
func selfSigned(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "latch test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
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
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	return server, &tls.Config{RootCAs: pool}
}

func TestFakeTLS(t *testing.T) {
	t.Parallel() // waits in real time
	srvTLS, cliTLS := selfSigned(t)
	fs := newFakeServer(t, withTLS(srvTLS), withFakeSecret(secretOne))
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, TLS: cliTLS, Secret: secretOne})
	ch := acquireAsync(cl, context.Background(), "tls", 0, AcquireOptions{})
	fc := fs.next(t)
	a := fc.expect(t, wire.OpAcquire)
	fc.send(t, granted(a.Owner, 8))
	if r := wait(t, ch, bound); r.err != nil || r.t.Token != 8 {
		t.Fatalf("Acquire over TLS: %v", r.err)
	}

	// A client that does not trust the certificate never gets to send anything.
	other := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, TLS: &tls.Config{}, Secret: secretOne})
	_, err := other.Acquire(context.Background(), "tls", 0, AcquireOptions{Wait: time.Second})
	if !errors.Is(err, ErrTimeout) || other.Stats().DialFailures == 0 {
		t.Fatalf("untrusted server: %v (stats %+v), want a timeout with dial failures", err, other.Stats())
	}
}
