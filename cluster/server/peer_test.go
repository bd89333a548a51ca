package server_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/servertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// ServePeer and Config.Router: the leader side of forwarding (a follower's link served as a
// session that starts ready) and the follower side's seam (acquires and releases handed to a
// Router while the node is not the leader).

func TestServePeerStartsReady(t *testing.T) {
	ts := startServer(t, withSecrets(secretOne))
	c := wiretest.Dial(t, servertest.ServePeers(t, ts.srv))
	c.Send(t, wiretest.Acquire(1, 0, 60, "k"))
	tok := c.ExpectGrant(t, 1)
	c.Alive(t, 2)
	// An ordinary client connection of the same server still needs the handshake.
	cl := ts.dial(t)
	cl.Send(t, wiretest.Acquire(3, 0, 60, "k"))
	cl.ExpectOp(t, wire.OpTimeout, 3)
	c.Send(t, wiretest.Release(4, tok, "k"))
	c.ExpectOp(t, wire.OpRelease, 4)
	// Peer sessions are not client connections.
	if n := ts.connections(t); n != 1 {
		t.Fatalf("latch_connections = %v with one client and one peer session, want 1", n)
	}
	// A hello on a peer session is a structural error like any H after the handshake.
	c.Send(t, wiretest.Hello(wire.Version, 0, [wire.NonceSize]byte{}))
	c.ExpectErrorAndClose(t, 0, wire.ReasonBadRequest)
}

// A peer session has no handshake deadline: idle time between frames is unlimited.
func TestServePeerIdleIsNotAHandshakeTimeout(t *testing.T) {
	slow(t)
	ts := startServer(t)
	c := wiretest.Dial(t, servertest.ServePeers(t, ts.srv))
	c.ExpectSilent(t, wire.HandshakeTimeout+time.Second)
	c.Alive(t, 1)
}

func TestServePeerShutdown(t *testing.T) {
	ts := startServer(t)
	holder := ts.dial(t)
	holder.Send(t, wiretest.Acquire(1, 0, 60, "k"))
	holder.ExpectGrant(t, 1)
	c := wiretest.Dial(t, servertest.ServePeers(t, ts.srv))
	c.Send(t, wiretest.Acquire(2, 30, 60, "k"))
	ts.waitWaiters(t, 1)
	ts.stop()
	c.ExpectErrorAndClose(t, 2, wire.ReasonUnavailable)

	a, b := net.Pipe()
	defer b.Close()
	if err := ts.srv.ServePeer(a, 0, ""); !errors.Is(err, server.ErrServerClosed) {
		t.Fatalf("ServePeer after Shutdown: %v, want ErrServerClosed", err)
	}
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Fatalf("ServePeer after Shutdown left the connection open")
	}
}

// fakeRouter answers every forwarded request itself, from another goroutine, and records it.
type fakeRouter struct {
	local atomic.Bool
	mu    sync.Mutex
	got   []wire.Request
	wg    sync.WaitGroup
}

func (r *fakeRouter) Local() bool { return r.local.Load() }

func (r *fakeRouter) Forward(req *wire.Request, readAt time.Time, out cluster.Replier) {
	if readAt.IsZero() || time.Since(readAt) > time.Minute {
		panic("Forward without the frame's read time")
	}
	cp := *req
	cp.Key = append([]byte(nil), req.Key...)
	r.mu.Lock()
	r.got = append(r.got, cp)
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if cp.Op == wire.OpAcquire {
			out.Reply(wire.Response{Op: wire.OpAcquire, Owner: cp.Owner, Token: 777})
			return
		}
		out.Reply(wire.Response{Op: wire.OpRelease, Owner: cp.Owner})
	}()
}

func (r *fakeRouter) requests() []wire.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.Request(nil), r.got...)
}

// startRouted starts a node and a server with router on 127.0.0.1, stopped at cleanup.
func startRouted(t *testing.T, router server.Router) (*server.Server, *cluster.Node, string) {
	t.Helper()
	node, err := cluster.NewNode(cluster.DefaultConfig())
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	srv, err := server.New(server.Config{Router: router, Logger: testLogger(t)}, node)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
	})
	return srv, node, ln.Addr().String()
}

func TestRouterForwardsAcquireAndRelease(t *testing.T) {
	rt := &fakeRouter{}
	t.Cleanup(rt.wg.Wait)
	srv, node, addr := startRouted(t, rt)
	c := wiretest.Dial(t, addr)
	c.Hello(t, nil)

	c.Send(t, wiretest.Acquire(1, 7, 60, "k"))
	c.Expect(t, wire.Response{Op: wire.OpAcquire, Owner: 1, Token: 777})
	c.Send(t, wiretest.Release(2, 5, "k"))
	c.ExpectOp(t, wire.OpRelease, 2)
	c.Alive(t, 3) // pings are the follower's own
	// Frames that fail their checks are answered here and never forwarded.
	c.Send(t, wiretest.Acquire(0, 0, 60, "k"), wiretest.Acquire(4, 0, 0, "k"), wiretest.Release(5, 1, ""))
	c.ExpectError(t, 0, wire.ReasonBadOwner)
	c.ExpectError(t, 4, wire.ReasonBadRange)
	c.ExpectError(t, 5, wire.ReasonBadKey)
	got := rt.requests()
	if len(got) != 2 || got[0].Op != wire.OpAcquire || got[0].Owner != 1 || got[0].Wait != 7 || got[0].Lease != 60 ||
		string(got[0].Key) != "k" || got[1].Op != wire.OpRelease || got[1].Owner != 2 || got[1].Token != 5 {
		t.Fatalf("forwarded %+v, want the acquire and the release as read", got)
	}
	if st := node.Stats(); st.Keys != 0 || st.LastToken != 0 {
		t.Fatalf("node decided a forwarded request: %+v", st)
	}

	// A peer session never forwards again: that node is not the leader, so E unavailable.
	p := wiretest.Dial(t, servertest.ServePeers(t, srv))
	p.Send(t, wiretest.Acquire(6, 0, 60, "k"), wiretest.Release(7, 1, "k"))
	p.ExpectError(t, 6, wire.ReasonUnavailable)
	p.ExpectError(t, 7, wire.ReasonUnavailable)
	p.Alive(t, 8)
	if n := len(rt.requests()); n != 2 {
		t.Fatalf("%d requests forwarded, want 2: a peer session's requests must not be", n)
	}

	// Once the node is the leader, it decides.
	rt.local.Store(true)
	c.Send(t, wiretest.Acquire(9, 0, 60, "k"))
	if tok := c.ExpectGrant(t, 9); tok != 1 {
		t.Fatalf("token %d from the local node, want 1", tok)
	}
	p.Send(t, wiretest.Acquire(10, 0, 60, "k"))
	p.ExpectOp(t, wire.OpTimeout, 10)
}

// A draining follower forwards no acquire: Shutdown follows at once and would close the
// session before the leader's answer came back (the client left with an indeterminate
// acquire, the leader with a grant nobody holds until its lease ends). It answers E
// unavailable, never applied, as a draining leader does; releases are still forwarded.
func TestDrainingFollowerForwardsNoAcquire(t *testing.T) {
	rt := &fakeRouter{}
	t.Cleanup(rt.wg.Wait)
	srv, _, addr := startRouted(t, rt)
	c := wiretest.Dial(t, addr)
	c.Hello(t, nil)

	srv.Drain()
	c.Send(t, wiretest.Acquire(1, 7, 60, "k"))
	c.ExpectError(t, 1, wire.ReasonUnavailable)
	c.Send(t, wiretest.Release(2, 5, "k"))
	c.ExpectOp(t, wire.OpRelease, 2)
	c.Alive(t, 3)
	if got := rt.requests(); len(got) != 1 || got[0].Op != wire.OpRelease {
		t.Fatalf("forwarded %+v while draining, want the release only", got)
	}
}
