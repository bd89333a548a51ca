package client

import (
	"context"
	"crypto/tls"
	"errors"
	"github.com/latchd/latch/cluster/clustertest"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
)

// selfSigned returns a server TLS config for 127.0.0.1 and a client config that trusts it.
func selfSigned(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	ca := clustertest.NewCA(t, "latch test")
	return &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "server")}}, &tls.Config{RootCAs: ca.Pool}
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
	if r := wait(t, ch, clustertest.Bound); r.err != nil || r.t.Token != 8 {
		t.Fatalf("Acquire over TLS: %v", r.err)
	}

	// A client that does not trust the certificate never gets to send anything.
	other := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, TLS: &tls.Config{}, Secret: secretOne})
	// The wait leaves a loaded machine time for the refused TLS handshake to fail first.
	_, err := other.Acquire(context.Background(), "tls", 0, AcquireOptions{Wait: 5 * time.Second})
	if !errors.Is(err, ErrTimeout) || other.Stats().DialFailures == 0 {
		t.Fatalf("untrusted server: %v (stats %+v), want a timeout with dial failures", err, other.Stats())
	}
}
