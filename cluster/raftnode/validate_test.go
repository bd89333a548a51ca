package raftnode

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// The tables below are shared by the pure tests, the test that sends every case through a
// real TCP transport into the filter (filter_validate_test.go), and the benchmark. A case
// with bad == "" must pass; any other must be refused with an error that contains bad.

func server(s raft.ServerSuffrage, id, addr string) raft.Server {
	return raft.Server{Suffrage: s, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)}
}

func confBytes(servers ...raft.Server) []byte {
	return raft.EncodeConfiguration(raft.Configuration{Servers: servers})
}

// threeVoters is the configuration a latch cluster of three holds.
var threeVoters = confBytes(server(raft.Voter, "n1", "127.0.0.1:1"), server(raft.Voter, "n2", "127.0.0.1:2"),
	server(raft.Voter, "n3", "127.0.0.1:3"))

// configurationCases are configuration bytes as an RPC carries them.
var configurationCases = []struct {
	name string
	data []byte
	bad  string
}{
	{"three voters", threeVoters, ""},
	{"a voter and a nonvoter", confBytes(server(raft.Voter, "n1", "a:1"), server(raft.Nonvoter, "n2", "a:2")), ""},
	{"a voter and a staging server", confBytes(server(raft.Voter, "n1", "a:1"), server(raft.Staging, "n2", "a:2")), ""},
	{"no bytes", nil, "does not decode"},
	{"empty bytes", []byte{}, "does not decode"},
	{"garbage", []byte("garbage"), "does not decode"},
	{"truncated", threeVoters[:len(threeVoters)-3], "does not decode"},
	{"msgpack nil", []byte{0xc0}, "no voter"},
	{"no servers", confBytes(), "no voter"},
	{"only a nonvoter", confBytes(server(raft.Nonvoter, "n1", "a:1")), "no voter"},
	{"an empty ID", confBytes(server(raft.Voter, "", "a:1")), "empty ID"},
	{"an empty address", confBytes(server(raft.Voter, "n1", "")), "empty address"},
	{"a repeated ID", confBytes(server(raft.Voter, "n1", "a:1"), server(raft.Voter, "n1", "a:2")), "same ID"},
	{"a repeated address", confBytes(server(raft.Voter, "n1", "a:1"), server(raft.Voter, "n2", "a:1")), "same address"},
	{"an unknown suffrage", confBytes(server(raft.Voter, "n1", "a:1"), server(7, "n2", "a:2")), "unknown suffrage"},
}

func cmdEntry(index, term uint64) *raft.Log {
	return &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: []byte{1, 2, 3}}
}

// entries returns count consecutive command entries from index first on, in term.
func entries(first, term uint64, count int) []*raft.Log {
	out := make([]*raft.Log, count)
	for i := range out {
		out[i] = cmdEntry(first+uint64(i), term)
	}
	return out
}

func appendReq(term, prev, prevTerm uint64, es ...*raft.Log) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{RPCHeader: header("leader"), Term: term, PrevLogEntry: prev, PrevLogTerm: prevTerm,
		Entries: es, LeaderCommitIndex: prev}
}

func appendEntriesCases() []struct {
	name string
	req  *raft.AppendEntriesRequest
	bad  string
} {
	type c = struct {
		name string
		req  *raft.AppendEntriesRequest
		bad  string
	}
	cases := []c{
		{"heartbeat", &raft.AppendEntriesRequest{RPCHeader: header("leader"), Term: 3}, ""},
		{"probe without entries", appendReq(3, 10, 2), ""},
		{"the first entries of a log", appendReq(1, 0, 0, entries(1, 1, 3)...), ""},
		{"64 entries after the previous one", appendReq(5, 100, 4, entries(101, 5, 64)...), ""},
		{"terms rising within the batch", appendReq(7, 10, 2, cmdEntry(11, 2), cmdEntry(12, 5), cmdEntry(13, 7)), ""},
		{"a commit index past the entries", &raft.AppendEntriesRequest{RPCHeader: header("leader"), Term: 3, PrevLogEntry: 5, PrevLogTerm: 3, LeaderCommitIndex: 900}, ""},
		{"noop and barrier", appendReq(3, 4, 3, &raft.Log{Index: 5, Term: 3, Type: raft.LogNoop}, &raft.Log{Index: 6, Term: 3, Type: raft.LogBarrier}), ""},
		{"a configuration entry", appendReq(3, 4, 3, &raft.Log{Index: 5, Term: 3, Type: raft.LogConfiguration, Data: threeVoters}), ""},

		{"term 0", &raft.AppendEntriesRequest{RPCHeader: header("leader")}, "term 0"},
		{"term 0 with entries", appendReq(0, 0, 0, cmdEntry(1, 0)), "term 0"},
		{"no previous entry with a previous term", appendReq(3, 0, 2, cmdEntry(1, 3)), "previous entry 0 with term 2"},
		{"a previous entry with term 0", appendReq(3, 7, 0, cmdEntry(8, 3)), "previous entry 7 with term 0"},
		{"previous term above the leader's", appendReq(3, 7, 4), "above the leader's term"},
		{"a nil entry", appendReq(3, 7, 3, nil), "entry 0 is nil"},
		{"a nil entry after a good one", appendReq(3, 7, 3, cmdEntry(8, 3), nil), "entry 1 is nil"},
		{"index 0", appendReq(3, 0, 0, cmdEntry(0, 3)), "index 0, want 1"},
		{"index 0 after the last index", appendReq(3, 1<<64-1, 3, cmdEntry(0, 3)), "index 0, want 0"},
		{"first entry not after the previous", appendReq(3, 7, 3, cmdEntry(7, 3)), "index 7, want 8"},
		{"first entry far ahead", appendReq(3, 0, 0, cmdEntry(1000, 3)), "index 1000, want 1"},
		{"a gap", appendReq(3, 7, 3, cmdEntry(8, 3), cmdEntry(10, 3)), "index 10, want 9"},
		{"a repeated index", appendReq(3, 7, 3, cmdEntry(8, 3), cmdEntry(8, 3)), "index 8, want 9"},
		{"indexes going back", appendReq(3, 7, 3, cmdEntry(8, 3), cmdEntry(9, 3), cmdEntry(5, 3)), "index 5, want 10"},
		{"entry term 0", appendReq(3, 0, 0, cmdEntry(1, 0)), "has term 0"},
		{"entry term above the leader's", appendReq(3, 7, 3, cmdEntry(8, 4)), "has term 4"},
		{"entry term below the previous entry's", appendReq(5, 7, 4, cmdEntry(8, 3)), "has term 3"},
		{"terms falling within the batch", appendReq(5, 7, 2, cmdEntry(8, 4), cmdEntry(9, 3)), "has term 3"},
		{"a deprecated add-peer entry", appendReq(3, 7, 3, &raft.Log{Index: 8, Term: 3, Type: raft.LogAddPeerDeprecated, Data: []byte{0x90}}), "LogAddPeerDeprecated"},
		{"a deprecated remove-peer entry", appendReq(3, 7, 3, &raft.Log{Index: 8, Term: 3, Type: raft.LogRemovePeerDeprecated, Data: []byte{0x90}}), "LogRemovePeerDeprecated"},
		{"an unknown entry type", appendReq(3, 7, 3, &raft.Log{Index: 8, Term: 3, Type: raft.LogConfiguration + 1}), "unknown type 6"},
		{"an unknown entry type 255", appendReq(3, 7, 3, cmdEntry(8, 3), &raft.Log{Index: 9, Term: 3, Type: 255}), "unknown type 255"},
	}
	for _, cc := range configurationCases {
		if cc.bad == "" {
			continue
		}
		cases = append(cases, c{"a configuration entry: " + cc.name,
			appendReq(3, 7, 3, cmdEntry(8, 3), &raft.Log{Index: 9, Term: 3, Type: raft.LogConfiguration, Data: cc.data}), cc.bad})
	}
	return cases
}

// candidateCases are RequestVote and RequestPreVote fields: the term asked for and the end
// of the candidate's log.
var candidateCases = []struct {
	name                      string
	term, lastIndex, lastTerm uint64
	bad                       string
}{
	{"an empty log", 1, 0, 0, ""},
	{"an empty log in a later term", 9, 0, 0, ""},
	{"a log in an older term", 9, 120, 4, ""},
	{"a log in the term asked for", 9, 120, 9, ""},
	{"huge values", 1 << 40, 1 << 40, 1 << 40, ""},
	{"term 0", 0, 0, 0, "term 0"},
	{"term 0 with a log", 0, 5, 0, "term 0"},
	{"no last entry with a last term", 3, 0, 2, "last entry 0 with term 2"},
	{"a last entry with term 0", 3, 10, 0, "last entry 10 with term 0"},
	{"last term above the term asked for", 3, 10, 4, "above the candidate's term"},
}

func snapReq() *raft.InstallSnapshotRequest {
	return &raft.InstallSnapshotRequest{RPCHeader: header("leader"), SnapshotVersion: raft.SnapshotVersionMax, Term: 4,
		LastLogIndex: 500, LastLogTerm: 3, Configuration: threeVoters, ConfigurationIndex: 1, Size: 37}
}

func installSnapshotCases() []struct {
	name string
	req  *raft.InstallSnapshotRequest
	bad  string
} {
	type c = struct {
		name string
		req  *raft.InstallSnapshotRequest
		bad  string
	}
	with := func(f func(r *raft.InstallSnapshotRequest)) *raft.InstallSnapshotRequest {
		r := snapReq()
		f(r)
		return r
	}
	cases := []c{
		{"the leader's newest snapshot", snapReq(), ""},
		{"a snapshot in the leader's term", with(func(r *raft.InstallSnapshotRequest) { r.LastLogTerm = r.Term }), ""},
		{"the configuration at the snapshot's index", with(func(r *raft.InstallSnapshotRequest) { r.ConfigurationIndex = r.LastLogIndex }), ""},
		{"an empty snapshot", with(func(r *raft.InstallSnapshotRequest) { r.Size = 0 }), ""},
		{"a large snapshot", with(func(r *raft.InstallSnapshotRequest) { r.Size = 4 << 30 }), ""},

		{"version 0", with(func(r *raft.InstallSnapshotRequest) { r.SnapshotVersion = 0; r.Configuration = nil }), "snapshot version 0"},
		{"version 2", with(func(r *raft.InstallSnapshotRequest) { r.SnapshotVersion = 2 }), "snapshot version 2"},
		{"version -1", with(func(r *raft.InstallSnapshotRequest) { r.SnapshotVersion = -1 }), "snapshot version -1"},
		{"term 0", with(func(r *raft.InstallSnapshotRequest) { r.Term = 0 }), "term 0"},
		{"index 0", with(func(r *raft.InstallSnapshotRequest) { r.LastLogIndex = 0; r.ConfigurationIndex = 0 }), "snapshot at index 0"},
		{"snapshot term 0", with(func(r *raft.InstallSnapshotRequest) { r.LastLogTerm = 0 }), "term 0"},
		{"snapshot term above the leader's", with(func(r *raft.InstallSnapshotRequest) { r.LastLogTerm = 5 }), "above the leader's term"},
		{"configuration index past the snapshot", with(func(r *raft.InstallSnapshotRequest) { r.ConfigurationIndex = 501 }), "configuration index 501"},
		{"negative size", with(func(r *raft.InstallSnapshotRequest) { r.Size = -1 }), "size -1"},
	}
	for _, cc := range configurationCases {
		if cc.bad == "" {
			continue
		}
		cases = append(cases, c{"configuration: " + cc.name, with(func(r *raft.InstallSnapshotRequest) { r.Configuration = cc.data }), cc.bad})
	}
	return cases
}

// checkVerdict fails the test unless err is what bad says.
func checkVerdict(t *testing.T, name string, err error, bad string) {
	t.Helper()
	switch {
	case bad == "" && err != nil:
		t.Errorf("%s: refused (%v), want it passed", name, err)
	case bad != "" && err == nil:
		t.Errorf("%s: passed, want it refused (%s)", name, bad)
	case bad != "" && (!errors.Is(err, ErrMalformedRPC) || !strings.Contains(err.Error(), bad)):
		t.Errorf("%s: error %q, want ErrMalformedRPC with %q", name, err, bad)
	}
}

func TestValidateAppendEntries(t *testing.T) {
	for _, c := range appendEntriesCases() {
		checkVerdict(t, c.name, validateAppendEntries(c.req), c.bad)
		checkVerdict(t, c.name+" (validate)", validate(c.req), c.bad)
	}
}

func TestValidateRequestVoteAndPreVote(t *testing.T) {
	for _, c := range candidateCases {
		vote := &raft.RequestVoteRequest{RPCHeader: header("leader"), Term: c.term, LastLogIndex: c.lastIndex, LastLogTerm: c.lastTerm}
		checkVerdict(t, "RequestVote, "+c.name, validateRequestVote(vote), c.bad)
		checkVerdict(t, "RequestVote, "+c.name+" (validate)", validate(vote), c.bad)
		pre := &raft.RequestPreVoteRequest{RPCHeader: header("leader"), Term: c.term, LastLogIndex: c.lastIndex, LastLogTerm: c.lastTerm}
		checkVerdict(t, "RequestPreVote, "+c.name, validateRequestPreVote(pre), c.bad)
		checkVerdict(t, "RequestPreVote, "+c.name+" (validate)", validate(pre), c.bad)
	}
}

func TestValidateInstallSnapshot(t *testing.T) {
	for _, c := range installSnapshotCases() {
		checkVerdict(t, c.name, validateInstallSnapshot(c.req), c.bad)
		checkVerdict(t, c.name+" (validate)", validate(c.req), c.bad)
	}
}

func TestValidateTimeoutNow(t *testing.T) {
	if err := validate(&raft.TimeoutNowRequest{RPCHeader: header("leader")}); err != nil {
		t.Fatalf("TimeoutNow refused: %v", err)
	}
}

func TestCheckConfigurationData(t *testing.T) {
	for _, c := range configurationCases {
		err := checkConfigurationData(c.data)
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: refused (%v), want it passed", c.name, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: error %v, want one with %q", c.name, err, c.bad)
		}
	}
}

// raft's own DecodeConfiguration panics on every configuration checkConfigurationData finds
// undecodable: without the validation, raft would call it on the RPC's bytes (installSnapshot
// and processConfigurationLogEntry in raft v1.8.0) on its main goroutine, and the process
// would end.
func TestRaftPanicsOnConfigurationsThatDoNotDecode(t *testing.T) {
	panics := func(data []byte) (msg string) {
		defer func() {
			if r := recover(); r != nil {
				msg = fmt.Sprint(r)
			}
		}()
		raft.DecodeConfiguration(data)
		return ""
	}
	if msg := panics(nil); msg != "failed to decode configuration: EOF" {
		t.Fatalf("raft.DecodeConfiguration of an empty configuration: panic %q, want the issue's \"failed to decode configuration: EOF\"", msg)
	}
	for _, c := range configurationCases {
		msg := panics(c.data)
		if undecodable := strings.Contains(c.bad, "does not decode"); undecodable != (msg != "") {
			t.Errorf("%s: raft's DecodeConfiguration panics %v (%q), but the validation says undecodable %v", c.name, msg != "", msg, undecodable)
		}
		if _, err := decodeConfiguration(c.data); (err != nil) != (msg != "") {
			t.Errorf("%s: decodeConfiguration error %v, raft's panic %q", c.name, err, msg)
		}
	}
}

// The leader's AppendEntries stream goes through validate: an RPC of 64 command entries
// and a heartbeat cost no allocation.
func TestValidateAllocatesNothing(t *testing.T) {
	full := appendReq(5, 100, 4, entries(101, 5, 64)...)
	beat := &raft.AppendEntriesRequest{RPCHeader: header("leader"), Term: 5}
	for _, req := range []*raft.AppendEntriesRequest{full, beat} {
		if err := validate(req); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(1000, func() { _ = validate(req) }); n != 0 {
			t.Fatalf("validating an AppendEntries with %d entries allocates %v times, want 0", len(req.Entries), n)
		}
	}
}

// go test -bench ValidateAppendEntries -benchmem ./cluster/raftnode/
func BenchmarkValidateAppendEntries(b *testing.B) {
	for _, n := range []int{0, 1, 64} {
		req := appendReq(5, 100, 4, entries(101, 5, n)...)
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := validate(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
