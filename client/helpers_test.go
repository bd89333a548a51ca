package client

// Test helpers: an injected clock, a real in-process latch server, polling.
//
// Timing: exact assertions use the fake clock. Where real time passes (a real server's wait
// or lease), bounds are several times what is needed, because the machines are shared and
// noisy; lower bounds are asserted only where the protocol forbids an early result.

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/servertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Secrets of at least 32 bytes; secretWrong is configured on no server.
var secretOne, secretTwo, secretWrong = clustertest.Secrets()

// newFakeClock is the client tests' clock: its timers run in their own goroutines, as
// time.AfterFunc's do.
func newFakeClock() *clustertest.FakeClock {
	return clustertest.NewAsyncFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

// eventually polls cond until it holds (clustertest.Eventually).
var eventually = clustertest.Eventually

// newTestClient makes a client closed at the end of the test.
func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	cl, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// result is what an Acquire run in the background returned.
type result struct {
	t   *Ticket
	err error
	at  time.Time // real time of the return
}

// acquireAsync runs Acquire in a goroutine and returns where its result will arrive.
func acquireAsync(cl *Client, ctx context.Context, key string, budget time.Duration, o AcquireOptions) <-chan result {
	ch := make(chan result, 1)
	go func() {
		tk, err := cl.Acquire(ctx, key, budget, o)
		ch <- result{tk, err, time.Now()}
	}()
	return ch
}

// wait returns the result from ch, failing the test after within.
func wait(t *testing.T, ch <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no result within %v", within)
		return result{}
	}
}

// pending fails the test if ch delivers within d.
func pending(t *testing.T, ch <-chan result, d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("returned early: ticket %v, error %v", r.t, r.err)
	case <-time.After(d):
	}
}

// releaseAsync runs Release in a goroutine and returns where its error will arrive.
func releaseAsync(cl *Client, ctx context.Context, key string, token uint64) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- cl.Release(ctx, key, token) }()
	return ch
}

// waitErr returns the error from ch, failing the test after within, naming what it waited for.
func waitErr(t *testing.T, ch <-chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(within):
		t.Fatalf("%s: no result within %v", what, within)
		return nil
	}
}

// doneWithin fails the test with msg if ctx is not done within d.
func doneWithin(t *testing.T, ctx context.Context, d time.Duration, msg string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(d):
		t.Fatal(msg)
	}
}

// realServer is a single-mode latch node and its server on 127.0.0.1.
type realServer struct {
	addr string
	node *cluster.Node
	srv  *server.Server
	stop func()
}

// startRealB starts a default real server for a benchmark and returns its address.
func startRealB(b *testing.B) string {
	b.Helper()
	return servertest.Start(b, cluster.DefaultConfig(), server.Config{}).Addr
}

// startReal starts a real server; edit adjusts the node's config. It stops at cleanup.
func startReal(t *testing.T, edit func(*cluster.Config), secrets ...[]byte) *realServer {
	t.Helper()
	cfg := cluster.DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	s := servertest.Start(t, cfg, server.Config{Secrets: secrets})
	return &realServer{addr: s.Addr, node: s.Node, srv: s.Srv, stop: s.Stop}
}

// waiters polls until the node has n waiters.
func (rs *realServer) waiters(t *testing.T, n int) {
	t.Helper()
	eventually(t, clustertest.Bound, "server waiters", func() bool { return rs.node.Stats().Waiters == n })
}

// testLogger sends the client's log to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// wrapFirstDial dials TCP and hands the first connection to wrap; later dials are plain.
func wrapFirstDial(wrap func(net.Conn) net.Conn) func(context.Context, string) (net.Conn, error) {
	var dials atomic.Int32
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil || dials.Add(1) > 1 {
			return nc, err
		}
		return wrap(nc), nil
	}
}
