package raftnode

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/latchd/latch/cluster/clustertest"
	oc "github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/cluster/rafttest"
	"github.com/latchd/latch/fsm"
)

// A raft future that raft never answers after its shutdown (hashicorp/raft issue 498) pins
// the goroutine waiting on it; that is the one leak the package accepts (see await).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"))
}

// Bounds on every wait in these tests: clustertest.Bound on any condition (passing runs take
// a few seconds each), and the raft timeouts below. These are generous, not quick: with
// 300/150 ms a leader lost its quorum ("failed to contact quorum") when other work kept both
// CPUs busy. A second for both means a first election takes 1-2 s and a stalled leader is
// deposed only after a full second without contact.
const (
	testHB       = time.Second
	testLease    = time.Second
	testApply    = 5 * time.Second
	testShutdown = 15 * time.Second
)

// testLogger sends hclog output to t.Log until the test's cleanups are done (raft's
// goroutines can log while they wind down, and t.Log after the test ends panics).
func testLogger(t testing.TB) hclog.Logger {
	return clustertest.Logger(t, "", hclog.Info)
}

// tnode is one node of a test cluster: its identity and directory survive restarts.
type tnode struct {
	id, addr, dir string
	n             *Node
	leads, follow atomic.Int32 // OnLeader and OnFollower calls
}

type tcluster struct {
	t     testing.TB
	log   hclog.Logger
	nodes []*tnode
	peers []Peer // InitialCluster; nil for a Bootstrap cluster of one
	mut   func(*Config)
	net   *rafttest.Net // the in-memory network; nil: TCP transports on 127.0.0.1
	live  sync.Map      // id -> *Node of each running node, for askLeader
}

// askLeader is the test nodes' Config.LeaderCommit: it asks the running node id itself.
func (c *tcluster) askLeader(_ context.Context, id, _ string) (uint64, error) {
	n, ok := c.live.Load(id)
	if !ok {
		return 0, fmt.Errorf("%s is not running", id)
	}
	return n.(*Node).LeaderCommit()
}

// transport is what a test node runs on: raft's in-memory or TCP transport.
type transport interface {
	raft.Transport
	Close() error
}

// newCluster starts size nodes with one InitialCluster (size 1: Bootstrap), each on its own
// in-memory transport (rafttest.Net) and its real stores in t.TempDir. mut, if set, adjusts
// each Config.
func newCluster(t testing.TB, size int, mut func(*Config)) *tcluster {
	t.Helper()
	return startCluster(t, size, mut, &rafttest.Net{})
}

// newTCPCluster is newCluster with each node on raft's TCP transport on 127.0.0.1: for the
// peer filter's tests (a stranger's RPCs over TCP, refusals timed as over the network), and the
// benchmarks, which measure the transport latch runs on.
func newTCPCluster(t testing.TB, size int, mut func(*Config)) *tcluster {
	t.Helper()
	return startCluster(t, size, mut, nil)
}

func startCluster(t testing.TB, size int, mut func(*Config), net *rafttest.Net) *tcluster {
	t.Helper()
	c := &tcluster{t: t, log: testLogger(t), mut: mut, net: net}
	transports := make([]transport, size)
	for i := range size {
		tr := c.transport("")
		transports[i] = tr
		tn := &tnode{id: fmt.Sprintf("node-%d", i), addr: string(tr.LocalAddr()), dir: filepath.Join(t.TempDir(), "data")}
		c.nodes = append(c.nodes, tn)
		if size > 1 {
			c.peers = append(c.peers, Peer{ID: tn.id, Addr: tn.addr})
		}
	}
	t.Cleanup(c.shutdownAll)
	for i, tn := range c.nodes {
		c.openWith(tn, transports[i], size == 1)
	}
	return c
}

// transport makes a transport at addr (a restart), or at a fresh address when addr is empty,
// on the cluster's network.
func (c *tcluster) transport(addr string) transport {
	c.t.Helper()
	if c.net != nil {
		return c.net.Transport(raft.ServerAddress(addr))
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	return c.tcpTransport(addr)
}

// tcpTransport binds a TCP transport; a restart rebinds the same port, which another process
// may hold for a moment, so binding is retried briefly.
func (c *tcluster) tcpTransport(addr string) *raft.NetworkTransport {
	c.t.Helper()
	var err error
	for range 50 {
		var tr *raft.NetworkTransport
		tr, err = raft.NewTCPTransportWithLogger(addr, nil, 3, 2*time.Second, c.log.Named("raft-net"))
		if err == nil {
			return tr
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("bind %s: %v", addr, err)
	return nil
}

func (c *tcluster) config(tn *tnode, tr raft.Transport, bootstrap bool) Config {
	cfg := DefaultConfig()
	cfg.ID = tn.id
	cfg.DataDir = tn.dir
	cfg.Transport = tr
	cfg.Bootstrap = bootstrap
	cfg.InitialCluster = c.peers
	cfg.Logger = c.log.Named(tn.id)
	cfg.HeartbeatTimeout = testHB
	cfg.ElectionTimeout = testHB
	cfg.LeaderLeaseTimeout = testLease
	cfg.ApplyTimeout = testApply
	cfg.OnLeader = func(*fsm.FSM) { tn.leads.Add(1) }
	cfg.OnFollower = func() { tn.follow.Add(1) }
	cfg.LeaderCommit = c.askLeader
	if c.mut != nil {
		c.mut(&cfg)
	}
	return cfg
}

func (c *tcluster) openWith(tn *tnode, tr transport, bootstrap bool) {
	c.t.Helper()
	n, err := Open(c.config(tn, tr, bootstrap))
	if err != nil {
		_ = tr.Close()
		c.t.Fatalf("open %s: %v", tn.id, err)
	}
	tn.n = n
	c.live.Store(tn.id, n)
}

// restart reopens a shut-down node from its directory, on its old address (on TCP, the same
// port).
func (c *tcluster) restart(tn *tnode) {
	c.t.Helper()
	c.openWith(tn, c.transport(tn.addr), len(c.nodes) == 1 && c.peers == nil)
}

// add starts an empty node that joins nobody until a leader adds it.
func (c *tcluster) add() *tnode {
	c.t.Helper()
	tr := c.transport("")
	tn := &tnode{id: fmt.Sprintf("node-%d", len(c.nodes)), addr: string(tr.LocalAddr()), dir: filepath.Join(c.t.TempDir(), "data")}
	c.nodes = append(c.nodes, tn)
	saved := c.peers
	c.peers = nil
	c.openWith(tn, tr, false)
	c.peers = saved
	return tn
}

func (c *tcluster) shutdown(tn *tnode) {
	c.t.Helper()
	if tn.n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), testShutdown)
	defer cancel()
	c.live.Delete(tn.id)
	if err := tn.n.Shutdown(ctx); err != nil {
		c.t.Errorf("shutdown %s: %v", tn.id, err)
	}
	if c.net != nil {
		c.net.Down(raft.ServerAddress(tn.addr))
	}
	tn.n = nil
}

func (c *tcluster) shutdownAll() {
	for _, tn := range c.nodes {
		c.shutdown(tn)
	}
}

func (c *tcluster) running() []*tnode {
	var out []*tnode
	for _, tn := range c.nodes {
		if tn.n != nil {
			out = append(out, tn)
		}
	}
	return out
}

// leader waits until exactly one running node is the established leader and every running
// node knows it, and returns it.
func (c *tcluster) leader() *tnode {
	c.t.Helper()
	var l *tnode
	eventually(c.t, "one established leader known to all", func() bool {
		l = nil
		for _, tn := range c.running() {
			if tn.n.IsLeader() {
				if l != nil {
					return false
				}
				l = tn
			}
		}
		if l == nil {
			return false
		}
		for _, tn := range c.running() {
			if id, _ := tn.n.Leader(); id != l.id {
				return false
			}
		}
		return true
	})
	return l
}

func (c *tcluster) followers() []*tnode {
	var out []*tnode
	for _, tn := range c.running() {
		if !tn.n.IsLeader() {
			out = append(out, tn)
		}
	}
	return out
}

// converged waits until every running node's FSM holds exactly want and has lastToken.
func (c *tcluster) converged(want map[string]fsm.Token, lastToken fsm.Token) {
	c.t.Helper()
	for _, tn := range c.running() {
		eventually(c.t, tn.id+" FSM converged", func() bool {
			return fsmEquals(tn.n.FSM(), want, lastToken)
		})
	}
}

func fsmEquals(f *fsm.FSM, want map[string]fsm.Token, lastToken fsm.Token) bool {
	if f.LastToken() != lastToken || f.Len() != len(want) {
		return false
	}
	for k, tok := range want {
		if h, ok := f.Holder([]byte(k)); !ok || h.Token != tok {
			return false
		}
	}
	return true
}

// eventually polls cond until it holds, failing the test after clustertest.Bound.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Bound, what, cond)
}

type outcome struct {
	res fsm.Result
	err error
}

// submit submits cmd and waits (bounded) for its outcome.
func submit(t testing.TB, n *Node, cmd fsm.Command) (fsm.Result, error) {
	t.Helper()
	ch := make(chan outcome, 1)
	n.Submit(cmd, func(r fsm.Result, err error) { ch <- outcome{r, err} })
	select {
	case o := <-ch:
		return o.res, o.err
	case <-time.After(clustertest.Bound):
		t.Fatalf("done not called within %v for %v", clustertest.Bound, cmd)
		return fsm.Result{}, nil
	}
}

// grant acquires key, which must be granted, and returns its token.
func grant(t testing.TB, n *Node, key string) fsm.Token {
	t.Helper()
	r, err := submit(t, n, acquire(key))
	if err != nil || r.Kind != fsm.Granted {
		t.Fatalf("acquire %q: %v %v", key, r.Kind, err)
	}
	return r.Token
}

// grantKeys grants the keys fmt.Sprintf(format, i) for i in [0, count) in order, each of
// which must be granted, and returns their tokens by key.
func grantKeys(t testing.TB, n *Node, format string, count int) map[string]fsm.Token {
	t.Helper()
	return grantMore(t, n, map[string]fsm.Token{}, format, count)
}

// grantMore is grantKeys adding to want, which it returns.
func grantMore(t testing.TB, n *Node, want map[string]fsm.Token, format string, count int) map[string]fsm.Token {
	t.Helper()
	for i := range count {
		k := fmt.Sprintf(format, i)
		want[k] = grant(t, n, k)
	}
	return want
}

func acquire(key string) fsm.Command {
	return fsm.Command{Kind: fsm.CmdAcquire, Key: []byte(key), Lease: 30}
}

func release(key string, tok fsm.Token) fsm.Command {
	return fsm.Command{Kind: fsm.CmdRelease, Key: []byte(key), Token: tok}
}

// exactlyOneOutcome checks that err is of exactly one of the outcomes Unavailable (NotLeader
// included), Refused and Indeterminate.
func exactlyOneOutcome(err error) bool {
	n := 0
	for _, k := range []oc.Kind{oc.Unavailable, oc.Refused, oc.Indeterminate} {
		if errors.Is(err, k) {
			n++
		}
	}
	return n == 1
}
