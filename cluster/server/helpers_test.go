package server_test

// Conformance tests of the latch/1 server against docs/protocol.md, over real TCP on 127.0.0.1.
// Every test starts its own node and server; frames are built byte by byte by wiretest.
//
// Timing: assertions say "within X" with X several times what the protocol needs, because the
// machines these run on are shared and noisy. Lower bounds are asserted only where the
// protocol forbids an early answer (a lease never ends early, a wait never runs out early).
// Tests that need real seconds to pass call slow(t), which runs them in parallel.

import (
	"flag"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/servertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

func TestMain(m *testing.M) {
	// The slow tests mostly sleep through protocol timeouts; on a 2-core machine the default
	// -parallel (GOMAXPROCS) would run them two at a time. Run more at once unless told.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(max(16, runtime.GOMAXPROCS(0))))
	}
	goleak.VerifyTestMain(m)
}

// Secrets of at least wire.MinSecretLen bytes; secretOther is configured on no server.
var secretOne, secretTwo, secretOther = clustertest.Secrets()

// slow marks a test that waits for real protocol timeouts; it runs in parallel with the others.
func slow(t *testing.T) {
	t.Helper()
	t.Parallel()
}

type options struct {
	node     cluster.Config
	secrets  [][]byte
	maxConns int
	logLevel hclog.Level // 0: debug
}

type option func(*options)

// withSecrets makes the server ask for auth and accept a proof made with any of secrets.
func withSecrets(secrets ...[]byte) option {
	return func(o *options) { o.secrets = secrets }
}

func withMaxConns(n int) option { return func(o *options) { o.maxConns = n } }

// withLogLevel logs only at level and above: for floods, whose connections would otherwise
// each log two debug lines.
func withLogLevel(l hclog.Level) option { return func(o *options) { o.logLevel = l } }

// withLimits sets the hard limits of the three admission gauges (section 6).
func withLimits(pending, keys, waiters int) option {
	return func(o *options) {
		o.node.MaxPending, o.node.MaxKeys, o.node.MaxWaiters = pending, keys, waiters
	}
}

func withTokenFloor(floor uint64) option { return func(o *options) { o.node.TokenFloor = floor } }

// testServer is a node and its server listening on 127.0.0.1.
type testServer struct {
	addr    string
	node    *cluster.Node
	srv     *server.Server
	metrics *cluster.Metrics
	secret  []byte // what clients prove with; nil when the server asks for no auth
	stop    func() // shuts down once; also run at cleanup
}

// startServer starts a node (with its expiry sweep) and a server on 127.0.0.1:0. Both stop
// when the test ends, after the test's connections have closed.
func startServer(t *testing.T, opts ...option) *testServer {
	t.Helper()
	o := options{node: cluster.DefaultConfig()}
	for _, f := range opts {
		f(&o)
	}
	log := testLogger(t)
	if o.logLevel != hclog.NoLevel {
		log.SetLevel(o.logLevel)
	}
	m := cluster.NewMetrics()
	o.node.Logger, o.node.Metrics = log.Named("node"), m
	s := servertest.Start(t, o.node, server.Config{Secrets: o.secrets, MaxConns: o.maxConns, Logger: log.Named("server"), Metrics: m})
	ts := &testServer{addr: s.Addr, node: s.Node, srv: s.Srv, metrics: m, stop: s.Stop}
	if len(o.secrets) > 0 {
		ts.secret = o.secrets[0]
	}
	return ts
}

// dial connects and makes the handshake (with the server's first secret, if any).
func (ts *testServer) dial(t *testing.T) *wiretest.Conn {
	t.Helper()
	c := wiretest.Dial(t, ts.addr)
	c.Hello(t, ts.secret)
	return c
}

// waitStats polls the node until ok holds for its gauges, for at most within.
func (ts *testServer) waitStats(t *testing.T, within time.Duration, what string, ok func(cluster.Stats) bool) cluster.Stats {
	t.Helper()
	var st cluster.Stats
	eventually(t, within, what, func() bool { st = ts.node.Stats(); return ok(st) })
	return st
}

// waitWaiters polls until the node has exactly n waiters (and as many pending acquires).
func (ts *testServer) waitWaiters(t *testing.T, n int) {
	t.Helper()
	ts.waitStats(t, 10*time.Second, "waiters", func(s cluster.Stats) bool { return s.Waiters == n })
}

// connections reads the server's open-connections gauge.
func (ts *testServer) connections(t *testing.T) float64 {
	t.Helper()
	mfs, err := ts.metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "latch_connections" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no latch_connections gauge")
	return 0
}

// eventually polls cond until it holds (clustertest.Eventually).
var eventually = clustertest.Eventually

// within fails the test unless lo <= d <= hi (clustertest.Between).
var within = clustertest.Between

// resp is the response op with owner (T, B, R, N, P).
func resp(op wire.Op, owner uint64) wire.Response { return wire.Response{Op: op, Owner: owner} }

func errResp(owner uint64, reason wire.Reason) wire.Response {
	return wire.Response{Op: wire.OpError, Owner: owner, Reason: reason}
}

// logWriter sends hclog lines to t.Log until the test ends; later lines (from goroutines that
// outlive the test by a moment) are dropped rather than panicking.
// testLogger returns an hclog logger writing into t.Log. Call it before registering other
// cleanups, so that it is silenced last.
func testLogger(t *testing.T) hclog.Logger {
	return clustertest.Logger(t, "latch", hclog.Debug)
}
