package forward_test

// Tests of forwarding over real TCP on 127.0.0.1. A "leader" is a single-mode node and server
// that also serves a plain TCP listener through ServePeer (standing in for the forward channel
// of cluster/peer). A "follower" is another node and server whose Router is never local and
// forwards through a forward.Link dialling the leader's listener. Clients talk to the follower
// with wiretest, byte by byte.
//
// Timing: upper bounds are generous (shared, noisy machines); lower bounds only where the
// protocol forbids an early answer (a wait never runs out early).

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/servertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// member is a node and its server on 127.0.0.1; a leader also has a forward listener.
type member struct {
	node    *cluster.Node
	metrics *cluster.Metrics
	srv     *server.Server
	addr    string // the client port
	peer    string // the forward listener (leaders only)
}

// startMember starts a node (with its sweep) and a server with router on 127.0.0.1:0, and
// with peer also a listener that serves every connection with ServePeer. Everything stops
// when the test ends.
func startMember(t *testing.T, name string, cfg cluster.Config, router server.Router, peer bool) *member {
	t.Helper()
	log := testLogger(t).Named(name)
	cfg.Logger = log.Named("node")
	node, err := cluster.NewNode(cfg)
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	ran := make(chan struct{})
	go func() { node.Run(); close(ran) }()
	metrics := cluster.NewMetrics()
	srv, err := server.New(server.Config{Logger: log.Named("server"), Router: router, Metrics: metrics}, node)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ln := listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	m := &member{node: node, metrics: metrics, srv: srv, addr: ln.Addr().String()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("%s: Shutdown: %v", name, err)
		}
		node.Close()
		<-ran
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("%s: Serve returned %v", name, err)
		}
	})
	if peer {
		m.peer = servertest.ServePeers(t, srv) // stops before the cleanup above
	}
	return m
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

// startLeader starts a leader with default limits, or with cfg's when given.
func startLeader(t *testing.T, cfg ...cluster.Config) *member {
	t.Helper()
	c := cluster.DefaultConfig()
	if len(cfg) > 0 {
		c = cfg[0]
	}
	return startMember(t, "leader", c, nil, true)
}

// viaLink is the follower's Router: never local, everything through the link.
type viaLink struct{ link *forward.Link }

func (viaLink) Local() bool { return false }

func (r viaLink) Forward(req *wire.Request, readAt time.Time, out cluster.Replier) {
	r.link.Forward(req, readAt, out)
}

// startFollower starts a follower that forwards through link.
func startFollower(t *testing.T, link *forward.Link) *member {
	t.Helper()
	return startMember(t, "follower", cluster.DefaultConfig(), viaLink{link}, false)
}

// tcpDial dials plain TCP: with latch1 or revised, the Config.Dial of the tests.
func tcpDial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// latch1 is a Config.Dial whose connections are latch/1 forward channels.
func latch1(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, uint8, error) {
	return func(ctx context.Context, addr string) (net.Conn, uint8, error) {
		nc, err := dial(ctx, addr)
		return nc, 0, err
	}
}

// revised is a Config.Dial whose connections are forward channels of revision 2.
func revised(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, uint8, error) {
	return func(ctx context.Context, addr string) (net.Conn, uint8, error) {
		nc, err := dial(ctx, addr)
		return nc, wire.FlagLeases, err
	}
}

// newLink returns a link dialling with plain TCP (unless edit replaces Dial), with leader set
// when not empty. It is closed when the test ends, after the follower has shut down.
func newLink(t *testing.T, leader string, edit ...func(*forward.Config)) *forward.Link {
	t.Helper()
	cfg := forward.DefaultConfig()
	cfg.Dial = latch1(tcpDial)
	cfg.Logger = testLogger(t).Named("link")
	for _, f := range edit {
		f(&cfg)
	}
	l, err := forward.NewLink(cfg)
	if err != nil {
		t.Fatalf("NewLink: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	if leader != "" {
		l.SetLeader(leader)
	}
	return l
}

// cluster2 is a leader and a follower linked to it.
type cluster2 struct {
	leader, follower *member
	link             *forward.Link
}

func startPair(t *testing.T, edit ...func(*forward.Config)) *cluster2 {
	t.Helper()
	ld := startLeader(t)
	link := newLink(t, ld.peer, edit...)
	return &cluster2{leader: ld, follower: startFollower(t, link), link: link}
}

// dial connects a client to m and makes the handshake.
func (m *member) dial(t *testing.T) *wiretest.Conn {
	t.Helper()
	c := wiretest.Dial(t, m.addr)
	c.Hello(t, nil)
	return c
}

// queue sends c an acquire of key that waits (up to 30 s, lease 60 s) and waits until m
// counts waiters waiters.
func (m *member) queue(t *testing.T, c *wiretest.Conn, owner uint64, key string, waiters int) {
	t.Helper()
	c.Send(t, wiretest.Acquire(owner, 30, 60, key))
	m.waitWaiters(t, waiters)
}

// waitWaiters polls until m's node has n waiters.
func (m *member) waitWaiters(t *testing.T, n int) {
	t.Helper()
	eventually(t, clustertest.Bound, "waiters", func() bool { return m.node.Stats().Waiters == n })
}

// idle polls until the link has nothing queued or in flight.
func idle(t *testing.T, l *forward.Link) {
	t.Helper()
	eventually(t, clustertest.Bound, "link idle", func() bool {
		st := l.Stats()
		return st.Queued == 0 && st.InFlight == 0
	})
}

// untouched fails unless the follower's own lock table never granted anything.
func (m *member) untouched(t *testing.T) {
	t.Helper()
	if st := m.node.Stats(); st.Keys != 0 || st.LastToken != 0 || st.Waiters != 0 || st.Pending != 0 {
		t.Fatalf("follower node decided something itself: %+v", st)
	}
}

// eventually polls cond until it holds (clustertest.Eventually).
var eventually = clustertest.Eventually

// between fails the test unless lo <= d <= hi (clustertest.Between).
var between = clustertest.Between

func errResp(owner uint64, reason wire.Reason) wire.Response {
	return wire.Response{Op: wire.OpError, Owner: owner, Reason: reason}
}

// fake is a scripted stand-in for a leader's forward listener: handle runs for each
// connection in its own goroutine and may do anything with it. Connections and the
// listener are closed when the test ends.
type fake struct {
	addr  string
	ln    net.Listener
	dials atomic.Int32
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startFake(t *testing.T, handle func(nc net.Conn)) *fake {
	t.Helper()
	f := &fake{ln: listen(t)}
	f.addr = f.ln.Addr().String()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			nc, err := f.ln.Accept()
			if err != nil {
				return
			}
			f.dials.Add(1)
			f.mu.Lock()
			f.conns = append(f.conns, nc)
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				handle(nc)
			}()
		}
	}()
	t.Cleanup(func() {
		f.ln.Close()
		f.mu.Lock()
		for _, nc := range f.conns {
			nc.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

// readRequests decodes request frames from nc and calls each with a copy of every one, until
// each returns false or the connection ends.
func readRequests(nc net.Conn, each func(r wire.Request) bool) {
	dec := wire.NewRequestDecoder()
	buf := make([]byte, 4096)
	for {
		n, err := nc.Read(buf)
		p := buf[:n]
		for len(p) > 0 {
			used, done, derr := dec.Decode(p)
			p = p[used:]
			if derr != nil {
				return
			}
			if done {
				r := *dec.Request()
				r.Key = append([]byte(nil), r.Key...)
				if !each(r) {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func testLogger(t *testing.T) hclog.Logger {
	return clustertest.Logger(t, "latch", hclog.Debug)
}

// waitConns polls until m serves exactly n client connections (a closed one is gone from its
// sessions, so a reply to it would be dropped or given back).
func (m *member) waitConns(t *testing.T, n int) {
	t.Helper()
	eventually(t, clustertest.Bound, "client connections", func() bool {
		var v dto.Metric
		return m.metrics.Connections.Write(&v) == nil && v.GetGauge().GetValue() == float64(n)
	})
}
