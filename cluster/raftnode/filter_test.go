package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/latchd/latch/fsm"

	"github.com/latchd/latch/cluster/clustertest"
)

// slowTimeouts keeps elections out of tests that compare terms: on two loaded CPUs under
// -race, 300 ms heartbeats occasionally miss.
func slowTimeouts(cfg *Config) {
	cfg.HeartbeatTimeout = time.Second
	cfg.ElectionTimeout = time.Second
	cfg.LeaderLeaseTimeout = 500 * time.Millisecond
}

// nodeState is what a forged RPC must not change on a node.
type nodeState struct {
	term, last uint64
	leader     string
	lastToken  fsm.Token
	keys       int
	held       fsm.Token // the token holding key "held"
}

func stateOf(tn *tnode) nodeState {
	st := tn.n.Status()
	h, _ := tn.n.FSM().Holder([]byte("held"))
	return nodeState{term: st.Term, last: st.LastLogIndex, leader: st.LeaderID,
		lastToken: tn.n.FSM().LastToken(), keys: tn.n.FSM().Len(), held: h.Token}
}

func (s nodeState) String() string {
	return fmt.Sprintf("term %d, last index %d, leader %q, last token %d, %d keys, held by token %d",
		s.term, s.last, s.leader, s.lastToken, s.keys, s.held)
}

// forgery is one RPC a sender that is not a member sends to target.
type forgery struct {
	name string
	send func(tr *raft.NetworkTransport, from string, target *tnode) error
}

func header(from string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from), Addr: []byte("127.0.0.1:1")}
}

// floorEntry is a log entry that, applied, would exhaust the token counter for good.
func floorEntry(t testing.TB) []byte {
	b, err := fsm.AppendBatch(nil, []fsm.Command{{Kind: fsm.CmdFloor, Token: fsm.MaxToken}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// evilSnapshot is a valid snapshot of a table whose counter is exhausted.
func evilSnapshot(t testing.TB) []byte {
	f, err := fsm.NewFSM(0)
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: floorEntry(t)})
	var buf bytes.Buffer
	if _, err := f.Backup(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func lastTerm(tn *tnode) uint64 {
	v, _ := strconv.ParseUint(tn.n.raft.Stats()["last_log_term"], 10, 64)
	return v
}

// appendNext sends tn an AppendEntries from from, in term, with entry at the index after
// tn's last and a commit index that commits it.
func appendNext(tr *raft.NetworkTransport, from string, tn *tnode, term uint64, entry []byte) error {
	last := tn.n.raft.LastIndex()
	var resp raft.AppendEntriesResponse
	return tr.AppendEntries(raft.ServerID(tn.id), raft.ServerAddress(tn.addr), &raft.AppendEntriesRequest{
		RPCHeader: header(from), Term: term, PrevLogEntry: last, PrevLogTerm: lastTerm(tn),
		Entries:           []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: entry}},
		LeaderCommitIndex: last + 1,
	}, &resp)
}

func forgeries(t testing.TB) []forgery {
	entry, snap := floorEntry(t), evilSnapshot(t)
	return []forgery{
		{"AppendEntries with an entry at the next index, committed", func(tr *raft.NetworkTransport, from string, tn *tnode) error {
			return appendNext(tr, from, tn, tn.n.raft.CurrentTerm(), entry)
		}},
		{"AppendEntries with a higher term", func(tr *raft.NetworkTransport, from string, tn *tnode) error {
			return appendNext(tr, from, tn, tn.n.raft.CurrentTerm()+100, entry)
		}},
		{"heartbeat with a higher term", func(tr *raft.NetworkTransport, from string, tn *tnode) error {
			var resp raft.AppendEntriesResponse
			return tr.AppendEntries(raft.ServerID(tn.id), raft.ServerAddress(tn.addr), &raft.AppendEntriesRequest{
				RPCHeader: header(from), Term: tn.n.raft.CurrentTerm() + 100,
			}, &resp)
		}},
		{"RequestVote with a higher term", func(tr *raft.NetworkTransport, from string, tn *tnode) error {
			var resp raft.RequestVoteResponse
			return tr.RequestVote(raft.ServerID(tn.id), raft.ServerAddress(tn.addr), &raft.RequestVoteRequest{
				RPCHeader: header(from), Term: tn.n.raft.CurrentTerm() + 100,
				LastLogIndex: 1 << 40, LastLogTerm: 1 << 40, LeadershipTransfer: true,
			}, &resp)
		}},
		{"RequestPreVote with a higher term", func(tr *raft.NetworkTransport, from string, tn *tnode) error {
			var resp raft.RequestPreVoteResponse
			return tr.RequestPreVote(raft.ServerID(tn.id), raft.ServerAddress(tn.addr), &raft.RequestPreVoteRequest{
				RPCHeader: header(from), Term: tn.n.raft.CurrentTerm() + 100, LastLogIndex: 1 << 40, LastLogTerm: 1 << 40,
			}, &resp)
		}},
		{"TimeoutNow", func(tr *raft.NetworkTransport, from string, tn *tnode) error {
			var resp raft.TimeoutNowResponse
			return tr.TimeoutNow(raft.ServerID(tn.id), raft.ServerAddress(tn.addr), &raft.TimeoutNowRequest{RPCHeader: header(from)}, &resp)
		}},
		{"InstallSnapshot", func(tr *raft.NetworkTransport, from string, tn *tnode) error {
			last, term := tn.n.raft.LastIndex()+100, tn.n.raft.CurrentTerm()+100
			conf := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(from), Address: "127.0.0.1:1"}}}
			var resp raft.InstallSnapshotResponse
			return tr.InstallSnapshot(raft.ServerID(tn.id), raft.ServerAddress(tn.addr), &raft.InstallSnapshotRequest{
				RPCHeader: header(from), SnapshotVersion: raft.SnapshotVersionMax, Term: term,
				LastLogIndex: last, LastLogTerm: term, Configuration: raft.EncodeConfiguration(conf),
				ConfigurationIndex: last, Size: int64(len(snap)),
			}, &resp, bytes.NewReader(snap))
		}},
	}
}

// A sender that reaches the nodes' transports but is not in the configuration changes no
// node's term, log or lock table with any RPC raft has, and the cluster keeps granting. The
// refusals are logged once per sender, not per RPC. The same RPCs naming a member do reach
// raft: the filter is what stops them.
func TestRPCsFromNonMembersChangeNothing(t *testing.T) {
	logs := map[string]*clustertest.Buffer{}
	c := newTCPCluster(t, 3, func(cfg *Config) {
		slowTimeouts(cfg)
		buf := &clustertest.Buffer{}
		logs[cfg.ID] = buf
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.ID, Level: hclog.Info, Output: buf})
	})
	l := c.leader()
	held := grant(t, l.n, "held")
	for _, tn := range c.running() {
		eventually(t, tn.id+" applies the grant", func() bool { return tn.n.FSM().LastToken() == held })
	}
	evil := c.tcpTransport("127.0.0.1:0")
	t.Cleanup(func() { evil.CloseStreams(); _ = evil.Close() })

	for round := range 3 { // later rounds are logged by nobody: once per sender
		for _, f := range forgeries(t) {
			for _, tn := range c.running() {
				before := stateOf(tn)
				err := f.send(evil, "evil", tn)
				if err == nil || !strings.Contains(err.Error(), "not a voter or nonvoter") {
					t.Fatalf("round %d: %s to %s: error %v, want the refusal", round, f.name, tn.id, err)
				}
				if after := stateOf(tn); after != before {
					t.Fatalf("%s to %s changed it:\nbefore %v\nafter  %v", f.name, tn.id, before, after)
				}
			}
		}
	}
	want := map[string]fsm.Token{"held": held, "after": grant(t, l.n, "after")}
	if want["after"] != held+1 {
		t.Fatalf("token after the attack %d, want %d", want["after"], held+1)
	}
	c.converged(want, want["after"])
	for _, tn := range c.running() {
		if n := logs[tn.id].Count("refusing Raft RPCs from a sender outside the configuration"); n != 1 {
			t.Errorf("%s logged the refusal %d times for one sender, want once", tn.id, n)
		}
		if got, min := tn.n.Status().RefusedRPCs, uint64(3*len(forgeries(t))); got < min {
			t.Errorf("%s counted %d refused RPCs, want at least %d", tn.id, got, min)
		}
	}

	// Control: naming a member instead, a heartbeat with a higher term does move a follower
	// to that term. The peer credential is the only thing that keeps a stranger from doing
	// this (see the package doc).
	fol := c.followers()[0]
	before := fol.n.raft.CurrentTerm()
	if err := forgeries(t)[2].send(evil, l.id, fol); err != nil {
		t.Fatalf("heartbeat naming the leader: %v", err)
	}
	if after := fol.n.raft.CurrentTerm(); after < before+100 {
		t.Fatalf("term after a heartbeat naming a member: %d, want at least %d", after, before+100)
	}
	eventually(t, "a leader established in the forged term", func() bool {
		for _, tn := range c.running() {
			if tn.n.IsLeader() && tn.n.raft.CurrentTerm() >= before+100 {
				return true
			}
		}
		return false
	})
	want["recovered"] = grant(t, c.leader().n, "recovered")
	c.converged(want, want["recovered"])
}

// A node that has never been in a cluster takes AppendEntries from anyone holding the peer
// credential (the leader that adds it is in no configuration it knows), but not TimeoutNow.
func TestEmptyNodeRefusesOnlyTimeoutNow(t *testing.T) {
	c := newTCPCluster(t, 1, nil)
	tn := c.add()
	evil := c.tcpTransport("127.0.0.1:0")
	t.Cleanup(func() { evil.CloseStreams(); _ = evil.Close() })
	fs := forgeries(t)
	if err := fs[5].send(evil, "evil", tn); err == nil || !strings.Contains(err.Error(), "not a voter or nonvoter") {
		t.Fatalf("TimeoutNow to an empty node: %v, want the refusal", err)
	}
	if err := fs[2].send(evil, "evil", tn); err != nil {
		t.Fatalf("heartbeat to an empty node: %v, want it taken", err)
	}
	if err := tn.n.CheckPeer("anyone", "127.0.0.1:1"); err != nil {
		t.Fatalf("CheckPeer on an empty node: %v, want nil", err)
	}
}

// A node waiting to be added that was told whom to expect takes nothing from anyone else,
// and still joins when the leader adds it.
func TestExpectPeersNarrowsAnEmptyNode(t *testing.T) {
	c := newTCPCluster(t, 3, nil)
	l := c.leader()
	want := map[string]fsm.Token{"before": grant(t, l.n, "before")}
	var members []Peer
	for _, tn := range c.running() {
		members = append(members, Peer{ID: tn.id, Addr: tn.addr})
	}
	tn := c.add()
	tn.n.ExpectPeers(members)
	evil := c.tcpTransport("127.0.0.1:0")
	t.Cleanup(func() { evil.CloseStreams(); _ = evil.Close() })
	term := tn.n.raft.CurrentTerm()
	if err := forgeries(t)[2].send(evil, "evil", tn); err == nil || !strings.Contains(err.Error(), "not a voter or nonvoter") {
		t.Fatalf("heartbeat to a node expecting its cluster: %v, want the refusal", err)
	}
	if got := tn.n.raft.CurrentTerm(); got != term {
		t.Fatalf("term %d after a refused heartbeat, want %d", got, term)
	}
	if err := tn.n.CheckPeer("evil", "127.0.0.1:1"); err == nil {
		t.Fatal("CheckPeer admits a stranger to a node that expects its cluster")
	}
	if err := l.n.AddVoter(tn.id, tn.addr); err != nil {
		t.Fatalf("AddVoter: %v", err)
	}
	want["after"] = grant(t, l.n, "after")
	c.converged(want, want["after"])
}

// CheckPeer admits the configuration's members at their addresses only.
func TestCheckPeer(t *testing.T) {
	c := newTCPCluster(t, 3, nil)
	a, b := c.nodes[0], c.nodes[1]
	for _, tt := range []struct {
		id, addr string
		ok       bool
	}{
		{b.id, b.addr, true},
		{a.id, a.addr, true},
		{b.id, a.addr, false},
		{"evil", b.addr, false},
		{"", "", false},
	} {
		err := a.n.CheckPeer(tt.id, tt.addr)
		if (err == nil) != tt.ok {
			t.Errorf("CheckPeer(%q, %q) = %v, want ok %v", tt.id, tt.addr, err, tt.ok)
		}
	}
}

// registry maps running nodes' IDs to their Nodes, for a Vouch that asks them in process.
type registry struct {
	mu    sync.Mutex
	nodes map[string]*Node
	asked map[string]int // Vouch calls per sender
}

func (r *registry) sync(c *tcluster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes = map[string]*Node{}
	for _, tn := range c.running() {
		r.nodes[tn.id] = tn.n
	}
}

func (r *registry) vouch(_ context.Context, id string, members []Peer) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked[id]++
	for _, m := range members {
		n := r.nodes[m.ID]
		if n == nil {
			continue // not running: unreachable
		}
		for _, s := range n.Servers() {
			if s.ID == id {
				return s.Addr, true
			}
		}
	}
	return "", false
}

func (r *registry) timesAsked(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked[id]
}

// A member that was down while a node was added does not know that node, which may lead by
// the time the member comes back. Its RPCs are refused until another member vouches for it
// (Config.Vouch); then the member catches up from it. Without Vouch it stays refused.
func TestLaggingMemberCatchesUpFromANewLeader(t *testing.T) {
	for _, withVouch := range []bool{true, false} {
		t.Run(fmt.Sprintf("vouch=%v", withVouch), func(t *testing.T) {
			reg := &registry{asked: map[string]int{}}
			c := newTCPCluster(t, 3, func(cfg *Config) {
				slowTimeouts(cfg) // four voters with one down: a slow follower must not cost the lease
				if withVouch {
					cfg.Vouch = reg.vouch
				}
			})
			l := c.leader()
			want := map[string]fsm.Token{"before": grant(t, l.n, "before")}
			lag := c.followers()[0]
			c.converged(want, want["before"])
			c.shutdown(lag)

			tn := c.add()
			if err := l.n.AddVoter(tn.id, tn.addr); err != nil {
				t.Fatalf("AddVoter: %v", err)
			}
			want["while-down"] = grant(t, l.n, "while-down")
			c.converged(want, want["while-down"])
			// It started with no state: it takes part in elections once it has caught up
			// (amnesia.go), which it notices within a poll.
			eventually(t, tn.id+" takes part in elections", func() bool { return !tn.n.filter.amnesiac.Load() })
			if err := l.n.raft.LeadershipTransferToServer(raft.ServerID(tn.id), raft.ServerAddress(tn.addr)).Error(); err != nil {
				t.Fatalf("leadership transfer to the new node: %v", err)
			}
			if c.leader() != tn {
				t.Fatalf("leader after the transfer is not %s", tn.id)
			}
			c.restart(lag)
			reg.sync(c)
			want["after"] = grant(t, tn.n, "after")

			if !withVouch {
				eventually(t, lag.id+" refuses the new leader", func() bool { return lag.n.Status().RefusedRPCs >= 3 })
				// "after" was granted by the new leader once the member was back: it has it only
				// if it took the new leader's entries. (It may hold "while-down" from its own log:
				// its shutdown can race the entry's replication.)
				if lag.n.FSM().LastToken() >= want["after"] {
					t.Fatalf("%s caught up without a vouch (last token %d): the scenario does not test what it should", lag.id, lag.n.FSM().LastToken())
				}
				return
			}
			c.converged(want, want["after"])
			if reg.timesAsked(tn.id) == 0 {
				t.Fatalf("%s caught up without asking about %s: the scenario does not test what it should", lag.id, tn.id)
			}
			eventually(t, lag.id+" knows the new member", func() bool { return lag.n.CheckPeer(tn.id, tn.addr) == nil })
		})
	}
}

// The leader's AppendEntries stream pays a map lookup and the validation's loop over the
// entries per RPC in the filter: no allocation.
func TestFilterHotPathAllocatesNothing(t *testing.T) {
	m := &members{log: hclog.NewNullLogger()}
	set := memberSet{"leader": "127.0.0.1:1", "other": "127.0.0.1:2"}
	m.set.Store(&set)
	f := newFilter(nil, m, hclog.NewNullLogger())
	for _, req := range []*raft.AppendEntriesRequest{
		{RPCHeader: header("leader"), Term: 3},
		appendReq(3, 100, 3, entries(101, 3, 64)...),
	} {
		rpc := raft.RPC{Command: req}
		if !f.admit(rpc) {
			t.Fatal("a member's AppendEntries was refused")
		}
		if n := testing.AllocsPerRun(1000, func() { f.admit(rpc) }); n != 0 {
			t.Fatalf("admitting a member's AppendEntries with %d entries allocates %v times, want 0", len(req.Entries), n)
		}
	}
}

// A refused RPC is answered with its own type's empty response, never a nil body: raft's
// in-memory pipeline dereferences the body of every answer.
func TestRefusalCarriesATypedResponse(t *testing.T) {
	for _, c := range []struct {
		cmd  any
		want any
	}{
		{&raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}},
		{&raft.RequestVoteRequest{}, &raft.RequestVoteResponse{}},
		{&raft.RequestPreVoteRequest{}, &raft.RequestPreVoteResponse{}},
		{&raft.InstallSnapshotRequest{}, &raft.InstallSnapshotResponse{}},
		{&raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{}},
	} {
		if got := emptyResponse(c.cmd); fmt.Sprintf("%T", got) != fmt.Sprintf("%T", c.want) {
			t.Errorf("response to %T is %T, want %T", c.cmd, got, c.want)
		}
	}
}
