// Package servertest starts a real single-mode latch server in-process for tests: a
// cluster.Node with its expiry sweep and a server.Server listening on 127.0.0.1, and serves
// a server's peer connections (ServePeers). It is imported only by _test.go files (the
// client's tests, cluster/server's external tests, cluster/forward's);
// tests that need real processes start the binary instead (cmd/latch's process tests).
package servertest

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
)

// StopBound bounds each step of Stop: the server's shutdown, Serve's return, the node's Run.
const StopBound = 15 * time.Second

// Server is a node and its server on 127.0.0.1.
type Server struct {
	Addr string
	Node *cluster.Node
	Srv  *server.Server
	// Stop shuts the server down and closes the node, once; Start registers it as a cleanup.
	Stop func()
}

// Start starts a node with node's config and a server with srv's in front of it, on
// 127.0.0.1:0. Both stop when the test ends, after the test's own cleanups registered later
// have run; the stop fails the test if the server does not shut down cleanly within
// StopBound.
func Start(t testing.TB, node cluster.Config, srv server.Config) *Server {
	t.Helper()
	n, err := cluster.NewNode(node)
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	ran := make(chan struct{})
	go func() { n.Run(); close(ran) }()
	s, err := server.New(srv, n)
	if err != nil {
		n.Close()
		<-ran
		t.Fatalf("server.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		n.Close()
		<-ran
		t.Fatalf("listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	ts := &Server{Addr: ln.Addr().String(), Node: n, Srv: s}
	var once sync.Once
	ts.Stop = func() { once.Do(func() { stop(t, ts, served, ran) }) }
	t.Cleanup(ts.Stop)
	return ts
}

func stop(t testing.TB, ts *Server, served <-chan error, ran <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), StopBound)
	defer cancel()
	if err := ts.Srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	ts.Node.Close()
	select {
	case err := <-served:
		if !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	case <-time.After(StopBound):
		t.Errorf("Serve did not return after Shutdown")
	}
	select {
	case <-ran:
	case <-time.After(StopBound):
		t.Errorf("node.Run did not return after Close")
	}
}

// ServePeers serves every connection accepted on a fresh 127.0.0.1 listener with
// srv.ServePeer (the leader's side of a follower's forwarding link) and returns its
// address; a ServePeer that fails with anything but server.ErrServerClosed fails the test.
// When the test ends the listener closes and its accept loop is waited for, before the
// cleanups registered earlier (such as the server's own shutdown) run.
func ServePeers(t testing.TB, srv *server.Server) string {
	t.Helper()
	return ServePeersFlags(t, srv, 0)
}

// ServePeersFlags is ServePeers for forward links that carry the protocol revisions revs
// (srv.ServePeer: wire.FlagLeases for the revised forward channel).
func ServePeersFlags(t testing.TB, srv *server.Server, revs uint8) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			if err := srv.ServePeer(nc, revs, ""); err != nil && !errors.Is(err, server.ErrServerClosed) {
				t.Errorf("ServePeer: %v", err)
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}
