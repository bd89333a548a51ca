package peer

// The security test of docs/protocol.md section 9 against a real hashicorp/raft cluster whose
// transports run over StreamLayer on real TCP: a connection that has not proven itself
// cannot append entries, vote, install snapshots or make a node start an election.
//
// The attacker is a second raft.NetworkTransport: real Raft RPCs, msgpack-encoded by raft
// itself, sent over connections that write the raft channel byte without credentials (or
// with wrong ones). Each RPC carries a term far above the cluster's and, where it can, an
// entry or snapshot the FSM would record. The same RPCs sent with the cluster's credentials
// do change the cluster, which shows the test can fail.

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/latchd/latch/cluster/clustertest"
)

// recordFSM records the data of every applied command.
type recordFSM struct {
	mu      sync.Mutex
	applied [][]byte
}

func (f *recordFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, bytes.Clone(l.Data))
	return nil
}

func (f *recordFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return recordSnapshot(bytes.Join(f.applied, []byte{'\n'})), nil
}

func (f *recordFSM) Restore(rc io.ReadCloser) error {
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = nil
	if len(b) > 0 {
		f.applied = bytes.Split(b, []byte{'\n'})
	}
	return nil
}

func (f *recordFSM) entries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.applied))
	for i, b := range f.applied {
		out[i] = string(b)
	}
	return out
}

type recordSnapshot []byte

func (s recordSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (recordSnapshot) Release() {}

type raftNode struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	mux   *Mux
	layer *StreamLayer
	trans *raft.NetworkTransport
	fsm   *recordFSM
	r     *raft.Raft
}

// startCluster starts n raft nodes whose transports run over StreamLayer with the Config
// cfgFor(i) returns, bootstraps them as one cluster and waits for a leader.
func startCluster(t *testing.T, n int, cfgFor func(i int) Config) []*raftNode {
	t.Helper()
	nodes := make([]*raftNode, n)
	var servers []raft.Server
	for i := range nodes {
		cfg := cfgFor(i)
		var m *Mux
		if cfg.Advertise != "" {
			m = listenOn(t, cfg.Advertise, cfg)
		} else {
			m = listen(t, cfg)
		}
		layer, err := NewStreamLayer(m, nil)
		if err != nil {
			t.Fatal(err)
		}
		trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: layer, MaxPool: 3, Timeout: 10 * time.Second, Logger: hclog.NewNullLogger(),
		})
		id := raft.ServerID("n" + strconv.Itoa(i+1))
		nodes[i] = &raftNode{id: id, addr: trans.LocalAddr(), mux: m, layer: layer, trans: trans, fsm: &recordFSM{}}
		servers = append(servers, raft.Server{ID: id, Address: trans.LocalAddr()})
	}
	for _, nd := range nodes {
		conf := raft.DefaultConfig()
		conf.LocalID = nd.id
		conf.Logger = hclog.NewNullLogger()
		// Slow enough that a loaded machine running -race sees no spurious election while
		// the test compares terms; the first election takes about a second.
		conf.HeartbeatTimeout = 500 * time.Millisecond
		conf.ElectionTimeout = 500 * time.Millisecond
		conf.LeaderLeaseTimeout = 250 * time.Millisecond
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(conf, nd.fsm, store, store, raft.NewInmemSnapshotStore(), nd.trans)
		if err != nil {
			t.Fatal(err)
		}
		nd.r = r
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			_ = nd.r.Shutdown().Error()
		}
		for _, nd := range nodes {
			nd.trans.CloseStreams() // pooled outgoing connections; ends the peers' handlers
			_ = nd.trans.Close()
			_ = nd.mux.Close()
		}
	})
	leader(t, nodes)
	return nodes
}

// leader waits until exactly one node leads and every node knows it.
func leader(t *testing.T, nodes []*raftNode) *raftNode {
	t.Helper()
	var l *raftNode
	eventually(t, "one leader known to all", func() bool {
		l = nil
		for _, nd := range nodes {
			if nd.r.State() == raft.Leader {
				if l != nil {
					return false
				}
				l = nd
			}
		}
		if l == nil {
			return false
		}
		for _, nd := range nodes {
			if addr, _ := nd.r.LeaderWithID(); addr != l.addr {
				return false
			}
		}
		return true
	})
	return l
}

// clusterState is what an attack must not change.
type clusterState struct {
	leader  raft.ServerAddress
	term    []uint64
	last    []uint64
	applied [][]string
}

func stateOf(nodes []*raftNode) clusterState {
	var s clusterState
	for _, nd := range nodes {
		addr, _ := nd.r.LeaderWithID()
		if s.leader == "" {
			s.leader = addr
		} else if s.leader != addr {
			s.leader = "split: " + s.leader + "/" + addr
		}
		s.term = append(s.term, nd.r.CurrentTerm())
		s.last = append(s.last, nd.r.LastIndex())
		s.applied = append(s.applied, nd.fsm.entries())
	}
	return s
}

// agreed waits until every node has the same leader, term and last index (a follower may
// still be catching up from the last command, which would read as a change an attack made),
// and returns that state.
func agreed(t *testing.T, nodes []*raftNode) clusterState {
	t.Helper()
	var s clusterState
	eventually(t, "the nodes agree on leader, term and last index", func() bool {
		s = stateOf(nodes)
		for i := range s.term {
			if s.term[i] != s.term[0] || s.last[i] != s.last[0] || strings.HasPrefix(string(s.leader), "split") || s.leader == "" {
				return false
			}
		}
		return true
	})
	return s
}

func (s clusterState) String() string {
	return fmt.Sprintf("leader %s, terms %v, last indexes %v, applied %q", s.leader, s.term, s.last, s.applied)
}

// attacker is a raft.NetworkTransport that reaches nodes through dial and accepts nothing.
type attacker struct {
	dial func(addr string, timeout time.Duration) (net.Conn, error)
	done chan struct{}
	once sync.Once
}

func (a *attacker) Accept() (net.Conn, error) {
	<-a.done
	return nil, net.ErrClosed
}

func (a *attacker) Close() error {
	a.once.Do(func() { close(a.done) })
	return nil
}

func (a *attacker) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

func (a *attacker) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return a.dial(string(addr), timeout)
}

func newAttacker(t *testing.T, dial func(addr string, timeout time.Duration) (net.Conn, error)) *raft.NetworkTransport {
	t.Helper()
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: &attacker{dial: dial, done: make(chan struct{})}, MaxPool: 1, Timeout: 2 * time.Second,
		Logger: hclog.NewNullLogger(),
	})
	t.Cleanup(func() {
		trans.CloseStreams()
		_ = trans.Close()
	})
	return trans
}

// Ways to reach a node's raft channel.
func rawRaftDial(readHello bool) func(addr string, timeout time.Duration) (net.Conn, error) {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, err
		}
		if readHello { // a dialer that knows the protocol but holds no secret
			_ = c.SetReadDeadline(time.Now().Add(timeout))
			if _, err := io.ReadFull(c, make([]byte, helloSize)); err != nil {
				_ = c.Close()
				return nil, err
			}
			_ = c.SetReadDeadline(time.Time{})
		}
		if _, err := c.Write([]byte{ChannelRaft}); err != nil {
			_ = c.Close()
			return nil, err
		}
		return c, nil
	}
}

func peerRaftDial(cfg Config) func(addr string, timeout time.Duration) (net.Conn, error) {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return Dial(ctx, addr, ChannelRaft, cfg)
	}
}

// evilID is long so that every RPC is longer than a proof message and a protocol-aware
// dialer's RPC is judged (and refused) as a proof at once rather than at the deadline.
const evilID = "evil-node-that-holds-no-credentials-and-wants-to-lead-the-cluster"

func evilHeader() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(evilID), Addr: []byte("127.0.0.1:1")}
}

// rpcs are the Raft RPCs an attacker sends to target; each would change the cluster.
var rpcs = []struct {
	name string
	send func(tr *raft.NetworkTransport, target *raftNode) error
}{
	{"AppendEntries", func(tr *raft.NetworkTransport, target *raftNode) error {
		last := target.r.LastIndex()
		lastTerm, _ := strconv.ParseUint(target.r.Stats()["last_log_term"], 10, 64)
		term := target.r.CurrentTerm() + 100
		var resp raft.AppendEntriesResponse
		return tr.AppendEntries(target.id, target.addr, &raft.AppendEntriesRequest{
			RPCHeader: evilHeader(), Term: term, PrevLogEntry: last, PrevLogTerm: lastTerm,
			Entries:           []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: []byte("evil entry")}},
			LeaderCommitIndex: last + 1,
		}, &resp)
	}},
	{"RequestVote", func(tr *raft.NetworkTransport, target *raftNode) error {
		var resp raft.RequestVoteResponse
		return tr.RequestVote(target.id, target.addr, &raft.RequestVoteRequest{
			RPCHeader: evilHeader(), Term: target.r.CurrentTerm() + 100,
			LastLogIndex: 1 << 40, LastLogTerm: 1 << 40, LeadershipTransfer: true,
		}, &resp)
	}},
	{"TimeoutNow", func(tr *raft.NetworkTransport, target *raftNode) error {
		var resp raft.TimeoutNowResponse
		return tr.TimeoutNow(target.id, target.addr, &raft.TimeoutNowRequest{RPCHeader: evilHeader()}, &resp)
	}},
	{"InstallSnapshot", func(tr *raft.NetworkTransport, target *raftNode) error {
		term := target.r.CurrentTerm() + 100
		snap := []byte("evil snapshot")
		conf := raft.Configuration{Servers: []raft.Server{{ID: evilID, Address: "127.0.0.1:1"}}}
		var resp raft.InstallSnapshotResponse
		return tr.InstallSnapshot(target.id, target.addr, &raft.InstallSnapshotRequest{
			RPCHeader: evilHeader(), SnapshotVersion: raft.SnapshotVersionMax, Term: term,
			LastLogIndex: target.r.LastIndex() + 100, LastLogTerm: term,
			Configuration: raft.EncodeConfiguration(conf), ConfigurationIndex: target.r.LastIndex() + 100,
			Size: int64(len(snap)),
		}, &resp, bytes.NewReader(snap))
	}},
}

// attackLands sends the first of rpcs to the leader through dial, which holds what the
// cluster asks for (with says what): the leader takes the evil entry and steps up to the
// evil term. It is what every attack of attackAll would do if it got through.
func attackLands(t *testing.T, nodes []*raftNode, dial func(string, time.Duration) (net.Conn, error), with string) {
	t.Helper()
	l := leader(t, nodes)
	before := l.r.CurrentTerm()
	if err := rpcs[0].send(newAttacker(t, dial), l); err != nil {
		t.Fatalf("AppendEntries with %s: %v", with, err)
	}
	eventually(t, "the leader applies the entry", func() bool {
		e := l.fsm.entries()
		return len(e) > 0 && e[len(e)-1] == "evil entry"
	})
	if after := l.r.CurrentTerm(); after < before+100 {
		t.Fatalf("term %d after the RPC, want at least %d", after, before+100)
	}
}

// attackAll sends every RPC to the leader and to a follower through dial and checks each one
// failed and left the cluster as it was.
func attackAll(t *testing.T, nodes []*raftNode, dial func(string, time.Duration) (net.Conn, error)) {
	t.Helper()
	l := leader(t, nodes)
	var follower *raftNode
	for _, nd := range nodes {
		if nd != l {
			follower = nd
			break
		}
	}
	for _, rpc := range rpcs {
		for _, target := range []*raftNode{l, follower} {
			before := agreed(t, nodes)
			err := rpc.send(newAttacker(t, dial), target)
			if err == nil {
				t.Fatalf("%s to %s succeeded without credentials", rpc.name, target.id)
			}
			t.Logf("%s to %s: %v", rpc.name, target.id, err)
			if after := stateOf(nodes); after.String() != before.String() {
				t.Fatalf("%s to %s changed the cluster:\nbefore %v\nafter  %v", rpc.name, target.id, before, after)
			}
		}
	}
}

// checkHealthy applies one more command through the leader and checks every node applied
// exactly the commands the test made, in order.
func checkHealthy(t *testing.T, nodes []*raftNode, want []string) {
	t.Helper()
	l := leader(t, nodes)
	if err := l.r.Apply([]byte(want[len(want)-1]), clustertest.Bound).Error(); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, nd := range nodes {
		eventually(t, fmt.Sprintf("%s applies %q", nd.id, want), func() bool {
			return fmt.Sprint(nd.fsm.entries()) == fmt.Sprint(want)
		})
	}
}

// Unproven connections cannot touch a secret-protected cluster; proven ones can.
func TestRaftClusterRefusesUnauthenticatedRPCs(t *testing.T) {
	t.Parallel()
	cfgFor := func(i int) Config {
		cfg := testConfig(t, secretOld, secretNew)
		cfg.Logger = hclog.NewNullLogger() // raft's reconnects are not this test's story
		cfg.HandshakeTimeout = time.Second
		return cfg
	}
	nodes := startCluster(t, 3, cfgFor)
	checkHealthy(t, nodes, []string{"first"})

	t.Run("raw channel byte", func(t *testing.T) { attackAll(t, nodes, rawRaftDial(false)) })
	t.Run("after reading the hello", func(t *testing.T) { attackAll(t, nodes, rawRaftDial(true)) })
	t.Run("peer dialer without secret", func(t *testing.T) { attackAll(t, nodes, peerRaftDial(testConfig(t))) })
	t.Run("wrong secret", func(t *testing.T) { attackAll(t, nodes, peerRaftDial(testConfig(t, secretWrong))) })
	checkHealthy(t, nodes, []string{"first", "second"})

	// The same RPC with the cluster's secret gets through: the leader takes the evil entry
	// and steps down to the evil term. This is what the attacks above would have done.
	t.Run("right secret", func(t *testing.T) {
		attackLands(t, nodes, peerRaftDial(testConfig(t, secretNew)), "the cluster's secret")
	})
}

// Without a certificate from the cluster CA nothing reaches a mutual-TLS cluster.
func TestRaftClusterRefusesRPCsWithoutClusterCertificate(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "cluster")
	other := newCA(t, "elsewhere")
	cfgFor := func(i int) Config {
		cfg := ca.config(t, "n"+strconv.Itoa(i+1))
		cfg.Logger = hclog.NewNullLogger()
		cfg.HandshakeTimeout = time.Second
		return cfg
	}
	nodes := startCluster(t, 3, cfgFor)
	checkHealthy(t, nodes, []string{"first"})

	noCert := ca.config(t, "intruder")
	noCert.ClientTLS = noCert.ClientTLS.Clone()
	noCert.ClientTLS.Certificates = nil
	noCert.ClientTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &tls.Certificate{}, nil
	}
	otherCert := ca.config(t, "intruder")
	otherCert.ClientTLS = otherCert.ClientTLS.Clone()
	intruder := other.node(t, "intruder")
	otherCert.ClientTLS.Certificates = nil
	otherCert.ClientTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &intruder, nil
	}

	t.Run("plain TCP", func(t *testing.T) { attackAll(t, nodes, rawRaftDial(false)) })
	t.Run("TLS without certificate", func(t *testing.T) { attackAll(t, nodes, peerRaftDial(noCert)) })
	t.Run("certificate from another CA", func(t *testing.T) { attackAll(t, nodes, peerRaftDial(otherCert)) })
	checkHealthy(t, nodes, []string{"first", "second"})

	t.Run("cluster certificate", func(t *testing.T) {
		attackLands(t, nodes, peerRaftDial(ca.config(t, "n9")), "a cluster certificate")
	})
}

// listenOn is listen on addr.
func listenOn(t *testing.T, addr string, cfg Config) *Mux {
	t.Helper()
	var m *Mux
	var err error
	if ln, ok := held.LoadAndDelete(addr); ok {
		m, err = Serve(ln.(net.Listener), cfg)
	} else {
		m, err = Listen(addr, cfg)
	}
	if err != nil {
		t.Fatalf("Listen %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// held keeps the listeners of freeAddrs open, by address, until listenOn serves on them: a
// port that was closed in between could be taken by any other test or process.
var held sync.Map

// freeAddrs opens n loopback listeners and returns their addresses, for configurations that
// must name their own address before the node starts; listenOn takes them over.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		held.Store(addr, ln)
		t.Cleanup(func() {
			if ln, ok := held.LoadAndDelete(addr); ok {
				_ = ln.(net.Listener).Close()
			}
		})
		out = append(out, addr)
	}
	return out
}

// memberCheck admits the identities of r's configuration, at their addresses.
func memberCheck(r *raft.Raft) func(Identity) error {
	return func(id Identity) error {
		for _, s := range r.GetConfiguration().Configuration().Servers {
			if string(s.ID) == id.ID && string(s.Address) == id.Addr {
				return nil
			}
		}
		return fmt.Errorf("%v is not in the configuration", id)
	}
}

// With admission on the Raft channel, the cluster's secret is not enough: a dialer that
// states an identity outside the configuration, or none, reaches no node's raft.
func TestRaftClusterRefusesNonMembersWithTheSecret(t *testing.T) {
	t.Parallel()
	addrs := freeAddrs(t, 3)
	cfgFor := func(i int) Config {
		cfg := idConfig(t, "n"+strconv.Itoa(i+1), addrs[i], secretOld, secretNew)
		cfg.Logger = hclog.NewNullLogger()
		cfg.HandshakeTimeout = time.Second
		return cfg
	}
	nodes := startCluster(t, 3, cfgFor)
	for _, nd := range nodes {
		nd.layer.SetAdmission(Admission{Check: memberCheck(nd.r)})
	}
	checkHealthy(t, nodes, []string{"first"})

	t.Run("identity outside the configuration", func(t *testing.T) {
		attackAll(t, nodes, peerRaftDial(idConfig(t, evilID, "127.0.0.1:1", secretNew)))
	})
	t.Run("a member's ID at another address", func(t *testing.T) {
		attackAll(t, nodes, peerRaftDial(idConfig(t, "n1", "127.0.0.1:1", secretNew)))
	})
	t.Run("no identity", func(t *testing.T) { attackAll(t, nodes, peerRaftDial(testConfig(t, secretNew))) })
	// The members still talk to each other: new connections state their identities.
	for _, nd := range nodes {
		nd.trans.CloseStreams()
	}
	checkHealthy(t, nodes, []string{"first", "second"})
	var refused uint64
	for _, nd := range nodes {
		refused += nd.layer.Refused()
	}
	if want := uint64(3 * 2 * len(rpcs)); refused < want { // 3 ways, 2 targets, a connection per RPC
		t.Errorf("the nodes refused %d connections, want at least %d", refused, want)
	}
}
