package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// raftStatus is the part of GET /v1/status a forged RPC must not change.
type raftStatus struct {
	Term         uint64 `json:"term"`
	LastLogIndex uint64 `json:"last_log_index"`
	LastToken    uint64 `json:"last_token"`
	Keys         int    `json:"keys"`
	LeaderID     string `json:"leader_id"`
	RefusedRPCs  uint64 `json:"-"` // counted, allowed to change
}

func raftOf(t *testing.T, p *proc) raftStatus {
	t.Helper()
	code, body := httpGetQuiet(p.http + "/v1/status")
	var st struct {
		Raft *struct {
			raftStatus
			Refused uint64 `json:"refused_rpcs"`
		} `json:"raft"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.Raft == nil {
		t.Fatalf("GET /v1/status of %s: %d %s", p.http, code, body)
	}
	st.Raft.raftStatus.RefusedRPCs = st.Raft.Refused
	return st.Raft.raftStatus
}

// peerStream is a raft.StreamLayer that dials the Raft channel of the peer port with cfg
// and accepts nothing: hashicorp/raft's own transport in the hands of a non-member.
type peerStream struct {
	cfg  peer.Config
	done chan struct{}
	once sync.Once
}

func (s *peerStream) Accept() (net.Conn, error) { <-s.done; return nil, net.ErrClosed }
func (s *peerStream) Close() error              { s.once.Do(func() { close(s.done) }); return nil }
func (s *peerStream) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (s *peerStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return peer.Dial(ctx, string(addr), peer.ChannelRaft, s.cfg)
}

func attackerTransport(t *testing.T, cfg peer.Config) *raft.NetworkTransport {
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: &peerStream{cfg: cfg, done: make(chan struct{})}, MaxPool: 1, Timeout: 5 * time.Second,
		Logger: hclog.NewNullLogger(),
	})
	t.Cleanup(func() { tr.CloseStreams(); _ = tr.Close() })
	return tr
}

// forgedRPCs are the RPCs of the attack review, each naming from as its sender.
func forgedRPCs(t *testing.T) []struct {
	name string
	send func(tr *raft.NetworkTransport, from string, id, addr string, st raftStatus) error
} {
	floor, err := fsm.AppendBatch(nil, []fsm.Command{{Kind: fsm.CmdFloor, Token: fsm.MaxToken}})
	if err != nil {
		t.Fatal(err)
	}
	h := func(from string) raft.RPCHeader {
		return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from), Addr: []byte("127.0.0.1:1")}
	}
	snap := []byte("not even a snapshot")
	type rpc = struct {
		name string
		send func(tr *raft.NetworkTransport, from string, id, addr string, st raftStatus) error
	}
	appendAt := func(term uint64) func(*raft.NetworkTransport, string, string, string, raftStatus) error {
		return func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error {
			var resp raft.AppendEntriesResponse
			term := max(term, st.Term)
			return tr.AppendEntries(raft.ServerID(id), raft.ServerAddress(addr), &raft.AppendEntriesRequest{
				RPCHeader: h(from), Term: term, PrevLogEntry: st.LastLogIndex, PrevLogTerm: st.Term,
				Entries:           []*raft.Log{{Index: st.LastLogIndex + 1, Term: term, Type: raft.LogCommand, Data: floor}},
				LeaderCommitIndex: st.LastLogIndex + 1,
			}, &resp)
		}
	}
	return []rpc{
		{"AppendEntries of a token floor at the next index, committed", appendAt(0)},
		{"AppendEntries with term+100", func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error {
			return appendAt(st.Term+100)(tr, from, id, addr, st)
		}},
		{"heartbeat with term+100", func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error {
			var resp raft.AppendEntriesResponse
			return tr.AppendEntries(raft.ServerID(id), raft.ServerAddress(addr), &raft.AppendEntriesRequest{RPCHeader: h(from), Term: st.Term + 100}, &resp)
		}},
		{"RequestVote with term+100", func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error {
			var resp raft.RequestVoteResponse
			return tr.RequestVote(raft.ServerID(id), raft.ServerAddress(addr), &raft.RequestVoteRequest{
				RPCHeader: h(from), Term: st.Term + 100, LastLogIndex: 1 << 40, LastLogTerm: 1 << 40, LeadershipTransfer: true}, &resp)
		}},
		{"RequestPreVote with term+100", func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error {
			var resp raft.RequestPreVoteResponse
			return tr.RequestPreVote(raft.ServerID(id), raft.ServerAddress(addr), &raft.RequestPreVoteRequest{
				RPCHeader: h(from), Term: st.Term + 100, LastLogIndex: 1 << 40, LastLogTerm: 1 << 40}, &resp)
		}},
		{"TimeoutNow", func(tr *raft.NetworkTransport, from, id, addr string, _ raftStatus) error {
			var resp raft.TimeoutNowResponse
			return tr.TimeoutNow(raft.ServerID(id), raft.ServerAddress(addr), &raft.TimeoutNowRequest{RPCHeader: h(from)}, &resp)
		}},
		{"InstallSnapshot", func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error {
			var resp raft.InstallSnapshotResponse
			conf := raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(from), Address: "127.0.0.1:1"}}})
			return tr.InstallSnapshot(raft.ServerID(id), raft.ServerAddress(addr), &raft.InstallSnapshotRequest{
				RPCHeader: h(from), SnapshotVersion: raft.SnapshotVersionMax, Term: st.Term + 100,
				LastLogIndex: st.LastLogIndex + 100, LastLogTerm: st.Term + 100, Configuration: conf,
				ConfigurationIndex: st.LastLogIndex + 100, Size: int64(len(snap)),
			}, &resp, bytes.NewReader(snap))
		}},
	}
}

// A process that holds the peer secret but is not a member sends every Raft RPC, through
// hashicorp/raft's own transport, to every node of a real cluster: stating a made-up
// identity, stating none, and stating a member's identity while its RPCs name a stranger.
// No node's term, log or lock table changes, every refusal is logged once per source, and
// the cluster keeps granting.
func TestForgedRaftRPCsFromANonMemberChangeNothing(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	tc, c, secret, held := startHeldPeerCluster(t, "p", "raftauth/held")

	base := peer.DefaultConfig()
	base.Secrets = [][]byte{secret}
	made, none, member := base, base, base
	made.ID, made.Advertise = "evil", "127.0.0.1:1"
	member.ID, member.Advertise = "n1", tc.raft[0]
	for _, mode := range []struct {
		name string
		cfg  peer.Config
	}{{"made-up identity", made}, {"no identity", none}, {"a member's identity", member}} {
		for _, rpc := range forgedRPCs(t) {
			for i, p := range tc.procs {
				before := statuses(t, tc)
				err := rpc.send(attackerTransport(t, mode.cfg), "evil", fmt.Sprintf("n%d", i+1), tc.raft[i], before[i])
				if err == nil {
					t.Fatalf("%s, %s to n%d: accepted", mode.name, rpc.name, i+1)
				}
				if after := statuses(t, tc); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Fatalf("%s, %s to %s changed the cluster (error %v):\nbefore %+v\nafter  %+v", mode.name, rpc.name, p.http, err, before, after)
				}
			}
		}
	}

	c.Raw(t, wiretest.Acquire(2, 0, 30, "raftauth/held"))
	c.ExpectOp(t, wire.OpTimeout, 2)
	if next := c.Do(t, wiretest.Acquire(3, 0, 30, "raftauth/after")).Token; next != held+1 {
		t.Fatalf("token after the attack %d, want %d", next, held+1)
	}
	for i, p := range tc.procs {
		logs := p.stderr.String()
		for _, want := range []struct{ what, with string }{
			{"refusing a Raft connection", "evil@127.0.0.1:1"},
			{"refusing a Raft connection", `"peer":"(none)"`},
			{"refusing Raft RPCs from a sender outside the configuration", `"sender":"evil"`},
		} {
			if n := countLines(logs, want.what, want.with); n != 1 {
				t.Errorf("n%d logged %q for %s %d times, want once", i+1, want.what, want.with, n)
			}
		}
		if st := raftOf(t, p); st.RefusedRPCs < uint64(len(forgedRPCs(t))) {
			t.Errorf("n%d counted %d refused RPCs, want at least %d", i+1, st.RefusedRPCs, len(forgedRPCs(t)))
		}
	}
}

func statuses(t *testing.T, tc *testCluster) []raftStatus {
	var out []raftStatus
	for _, p := range tc.procs {
		st := raftOf(t, p)
		st.RefusedRPCs = 0
		out = append(out, st)
	}
	return out
}

func waitAll(t *testing.T, tc *testCluster, cond func(raftStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range tc.procs {
		for !cond(raftOf(t, p)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: condition not met within 30 s: %+v", p.http, raftOf(t, p))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// countLines counts the lines of logs that contain both what and with.
func countLines(logs, what, with string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, what) && strings.Contains(line, with) {
			n++
		}
	}
	return n
}

// startHeldPeerCluster starts three nodes with a peer secret (40 bytes of fill, returned)
// and an admin secret, takes key through the leader, and waits until every node has applied
// the grant, whose token it returns with the leader's connection that took it.
func startHeldPeerCluster(t *testing.T, fill, key string) (tc *testCluster, c *wiretest.Conn, secret []byte, held uint64) {
	t.Helper()
	dir := t.TempDir()
	secret = []byte(strings.Repeat(fill, 40))
	tc = startTestCluster(t, 3, "--peer-secret-file", writeSecretFile(t, dir, "peer", string(secret)),
		"--admin-secret-file", writeSecretFile(t, dir, "admin", strings.Repeat("a", 40)))
	_, c = tc.dialLeader(t)
	held = c.Do(t, wiretest.Acquire(1, 0, 300, key)).Token
	waitAll(t, tc, func(st raftStatus) bool { return st.LastToken == held })
	return tc, c, secret, held
}
