package peer

// Tests of the peer port over real TCP on 127.0.0.1. Bounds ("within X") carry generous slack
// because the machines these run on are shared and noisy; nothing here sleeps to let time
// pass except where a deadline is the thing under test.

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/latchd/latch/cluster/clustertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Secrets of at least wire.MinSecretLen bytes; secretWrong is held by no node. The vectors
// in docs/vectors/peer_handshake.json are computed over them.
var secretOld, secretNew, secretWrong = clustertest.Secrets()

// testLogger sends hclog output to t.Log.
func testLogger(t *testing.T) hclog.Logger {
	return clustertest.Logger(t, "peer", hclog.Debug)
}

// testConfig is DefaultConfig with secrets, a test logger and a short handshake timeout.
func testConfig(t *testing.T, secrets ...[]byte) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Secrets = secrets
	cfg.Logger = testLogger(t)
	cfg.HandshakeTimeout = 2 * time.Second
	return cfg
}

// inModes runs f as a subtest for each listener mode named: "plain" (no secret), "secret"
// (secretNew) and "tls" (mutual TLS for node n1 from a CA made for the test, and secretNew).
// The Config f gets is made with the subtest's t.
func inModes(t *testing.T, f func(t *testing.T, cfg Config), modes ...string) {
	t.Helper()
	var ca *testCA
	if slices.Contains(modes, "tls") {
		ca = newCA(t, "cluster")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			switch mode {
			case "plain":
				f(t, testConfig(t))
			case "secret":
				f(t, testConfig(t, secretNew))
			case "tls":
				f(t, ca.config(t, "n1", secretNew))
			default:
				t.Fatalf("no listener mode %q", mode)
			}
		})
	}
}

// listen starts a Mux on 127.0.0.1 and closes it when the test ends.
func listen(t *testing.T, cfg Config) *Mux {
	t.Helper()
	m, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// dial dials channel ch of m with cfg and fails the test on error.
func dial(t *testing.T, addr string, ch byte, cfg Config) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	c, err := Dial(ctx, addr, ch, cfg)
	if err != nil {
		t.Fatalf("Dial %s: %v", channelName(ch), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dialErr dials and returns the error, closing a connection that should not have been made.
func dialErr(t *testing.T, addr string, ch byte, cfg Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	c, err := Dial(ctx, addr, ch, cfg)
	if err == nil {
		_ = c.Close()
	}
	return err
}

// accept returns the next connection of l, failing the test if none comes within clustertest.Bound.
func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Accept: %v", r.err)
		}
		t.Cleanup(func() { _ = r.c.Close() })
		return r.c
	case <-time.After(clustertest.Bound):
		_ = l.Close() // ends the goroutine
		t.Fatalf("Accept: nothing within %v", clustertest.Bound)
		return nil
	}
}

// eventually polls cond until it holds, failing the test after clustertest.Bound.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Bound, what, cond)
}

// settled waits until m has no connection in the handshake, so its counters are final.
func settled(t *testing.T, m *Mux) Stats {
	t.Helper()
	eventually(t, "no connection in the handshake", func() bool { return m.Stats().Handshaking == 0 })
	return m.Stats()
}

// queued is how many authenticated connections wait for Accept on channel ch.
func queued(m *Mux, ch byte) int { return len(m.lns[ch].q) }

// rawDial opens a plain TCP connection that speaks no handshake by itself.
func rawDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, clustertest.Bound)
	if err != nil {
		t.Fatalf("raw dial: %v", err)
	}
	_ = c.SetDeadline(time.Now().Add(2 * clustertest.Bound))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readHello reads a listener's hello from c and returns it.
func readHello(t *testing.T, c net.Conn) [helloSize]byte {
	t.Helper()
	var h [helloSize]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("reading hello: %v", err)
	}
	if h[0] != helloMagic || h[1] != helloVersion {
		t.Fatalf("hello % x: not a peer hello", h[:3])
	}
	return h
}

// expectClosed reads c until it ends and fails the test if c yields data or stays open.
func expectClosed(t *testing.T, c net.Conn, within time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	var b [64]byte
	n, err := c.Read(b[:])
	if n > 0 {
		t.Fatalf("read % x, want the connection closed", b[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v", within)
	}
	if err == nil {
		t.Fatal("read returned nothing and no error")
	}
}

// fakeListener accepts one connection at a time on 127.0.0.1 and runs serve on it in the
// test's goroutine budget; it stands in for a listener that is not a real Mux.
func fakeListener(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(2 * clustertest.Bound))
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { _ = c.Close() }()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// testCA is a certificate authority made for one test.
type testCA struct{ *clustertest.CA }

func newCA(t *testing.T, name string) *testCA { return &testCA{clustertest.NewCA(t, name)} }

// node issues a certificate for 127.0.0.1 usable as both server and client.
func (ca *testCA) node(t *testing.T, name string) tls.Certificate { return ca.Issue(t, name) }

// tlsConfig is testConfig with mutual TLS from ca for a node called name.
func (ca *testCA) config(t *testing.T, name string, secrets ...[]byte) Config {
	t.Helper()
	cfg := testConfig(t, secrets...)
	cfg.TLS, cfg.ClientTLS = MutualTLS(ca.node(t, name), ca.Pool)
	return cfg
}
