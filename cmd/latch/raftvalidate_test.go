package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/wire/wiretest"
)

// refusals are a node's counts of refused Raft RPCs, from GET /v1/status.
type refusals struct {
	Refused   uint64 `json:"refused_rpcs"`
	Malformed uint64 `json:"malformed_rpcs"`
}

func refusalsOf(t *testing.T, p *proc) refusals {
	t.Helper()
	code, body := httpGetQuiet(p.http + "/v1/status")
	var st struct {
		Raft *refusals `json:"raft"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.Raft == nil {
		t.Fatalf("GET /v1/status of %s: %d %s", p.http, code, body)
	}
	return *st.Raft
}

// malformedRPC is one RPC that names the member from as its sender and holds fields no
// correct raft peer sends; without the filter's validation each would crash the node or
// leave its log with a hole (see cluster/raftnode/validate.go).
type malformedRPC struct {
	name, why string // why: a part of the refusal's reason
	send      func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error
}

func malformedRPCs() []malformedRPC {
	h := func(from string) raft.RPCHeader {
		return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from), Addr: []byte("127.0.0.1:1")}
	}
	snapshot := func(conf []byte) func(*raft.NetworkTransport, string, string, string, raftStatus) error {
		return func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error {
			data := []byte("not even a snapshot")
			var resp raft.InstallSnapshotResponse
			return tr.InstallSnapshot(raft.ServerID(id), raft.ServerAddress(addr), &raft.InstallSnapshotRequest{
				RPCHeader: h(from), SnapshotVersion: 1, Term: st.Term, LastLogIndex: st.LastLogIndex + 100, LastLogTerm: st.Term,
				Configuration: conf, ConfigurationIndex: 1, Size: int64(len(data)),
			}, &resp, bytes.NewReader(data))
		}
	}
	// appendAfterLast sends entries es(next, term) after the node's last entry, in its term,
	// committed: the only thing wrong with each is what its name says.
	appendAfterLast := func(es func(next, term uint64) []*raft.Log) func(*raft.NetworkTransport, string, string, string, raftStatus) error {
		return func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error {
			var resp raft.AppendEntriesResponse
			return tr.AppendEntries(raft.ServerID(id), raft.ServerAddress(addr), &raft.AppendEntriesRequest{
				RPCHeader: h(from), Term: st.Term, PrevLogEntry: st.LastLogIndex, PrevLogTerm: st.Term,
				Entries: es(st.LastLogIndex+1, st.Term), LeaderCommitIndex: st.LastLogIndex + 3,
			}, &resp)
		}
	}
	vote := func(term, lastIndex, lastTerm uint64) func(*raft.NetworkTransport, string, string, string, raftStatus) error {
		return func(tr *raft.NetworkTransport, from, id, addr string, _ raftStatus) error {
			var resp raft.RequestVoteResponse
			return tr.RequestVote(raft.ServerID(id), raft.ServerAddress(addr), &raft.RequestVoteRequest{
				RPCHeader: h(from), Term: term, LastLogIndex: lastIndex, LastLogTerm: lastTerm}, &resp)
		}
	}
	return []malformedRPC{
		{"InstallSnapshot version 1 without a configuration", "configuration does not decode: failed to decode configuration: EOF", snapshot(nil)},
		{"InstallSnapshot with a configuration that does not decode", "configuration does not decode", snapshot([]byte("garbage"))},
		{"InstallSnapshot with a configuration of no servers", "configuration has no voter", snapshot(raft.EncodeConfiguration(raft.Configuration{}))},
		{"AppendEntries with a configuration entry that does not decode", "configuration does not decode", appendAfterLast(func(next, term uint64) []*raft.Log {
			return []*raft.Log{{Index: next, Term: term, Type: raft.LogConfiguration, Data: []byte("garbage")}}
		})},
		{"AppendEntries with indexes that are not consecutive", "consecutive after the previous entry", appendAfterLast(func(next, term uint64) []*raft.Log {
			return []*raft.Log{{Index: next, Term: term, Type: raft.LogNoop}, {Index: next + 2, Term: term, Type: raft.LogNoop}}
		})},
		{"AppendEntries with a nil entry", "entry 0 is nil", appendAfterLast(func(uint64, uint64) []*raft.Log { return []*raft.Log{nil} })},
		{"AppendEntries with an entry of an unknown type, committed", "unknown type 42", appendAfterLast(func(next, term uint64) []*raft.Log {
			return []*raft.Log{{Index: next, Term: term, Type: 42}}
		})},
		{"RequestVote in term 0", "term 0", vote(0, 0, 0)},
		{"RequestVote with no last entry but a last term", "last entry 0 with term 5", vote(1<<20, 0, 5)},
		{"RequestPreVote with a last term above the term asked for", "above the candidate's term", func(tr *raft.NetworkTransport, from, id, addr string, st raftStatus) error {
			var resp raft.RequestPreVoteResponse
			return tr.RequestPreVote(raft.ServerID(id), raft.ServerAddress(addr), &raft.RequestPreVoteRequest{
				RPCHeader: h(from), Term: st.Term + 1, LastLogIndex: st.LastLogIndex, LastLogTerm: st.Term + 2}, &resp)
		}},
	}
}

// A process that holds the peer secret and claims to be the member n1, at n1's address,
// sends every node of a real three-node cluster RPCs that would crash hashicorp/raft
// (InstallSnapshot without a configuration or with one that does not decode, AppendEntries
// with such a configuration entry, a nil entry or an unknown entry type) or put holes in
// its log, and votes no correct peer asks for. Each is refused with its reason before raft
// sees it; every node keeps running and serving, counts the refusals and logs them once for
// the one sender.
func TestMalformedRaftRPCsFromAMemberAreRefused(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	tc, _, secret, held := startHeldPeerCluster(t, "q", "raftvalidate/held")

	n1 := peer.DefaultConfig()
	n1.Secrets = [][]byte{secret}
	n1.ID, n1.Advertise = "n1", tc.raft[0]
	start := time.Now()
	rpcs := malformedRPCs()
	for _, rpc := range rpcs {
		for i := range tc.procs {
			id := fmt.Sprintf("n%d", i+1)
			st := raftOf(t, tc.procs[i])
			err := rpc.send(attackerTransport(t, n1), "n1", id, tc.raft[i], st)
			if err == nil || !strings.Contains(err.Error(), "malformed Raft RPC") || !strings.Contains(err.Error(), rpc.why) {
				t.Fatalf("%s to %s: error %v, want the malformed-RPC refusal with %q", rpc.name, id, err, rpc.why)
			}
		}
	}
	elapsed := time.Since(start)

	for i, p := range tc.procs {
		select {
		case <-p.exited:
			t.Fatalf("n%d exited: %v\n%s", i+1, p.err, p.stderr.String())
		default:
		}
	}
	_, c := tc.dialLeader(t) // every node ready, one leads
	if next := c.Do(t, wiretest.Acquire(2, 0, 30, "raftvalidate/after")).Token; next != held+1 {
		t.Fatalf("token after the RPCs %d, want %d", next, held+1)
	}
	for i, p := range tc.procs {
		if r := refusalsOf(t, p); r.Malformed < uint64(len(rpcs)) || r.Refused < r.Malformed {
			t.Errorf("n%d counted %+v, want at least %d malformed, all of them refused", i+1, r, len(rpcs))
		}
		// Once a minute per sender: the RPCs took elapsed.
		n := countLines(p.stderr.String(), "refusing a malformed Raft RPC from a member", `"sender":"n1"`)
		if most := 1 + int(elapsed/time.Minute); n < 1 || n > most {
			t.Errorf("n%d logged the refusals of one sender %d times in %v, want 1..%d", i+1, n, elapsed, most)
		}
		if countLines(p.stderr.String(), "refusing a malformed Raft RPC from a member", `"reason":"malformed Raft RPC: `) == 0 {
			t.Errorf("n%d logged no reason for the refusal", i+1)
		}
	}
}
