package raftnode

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/fsm"
)

// memberFilter is a filter over inner whose configuration is "leader" alone, as a follower's
// would be, with its log in buf.
func memberFilter(inner raft.Transport, buf *clustertest.Buffer) *filter {
	m := &members{log: hclog.NewNullLogger()}
	set := memberSet{"leader": "127.0.0.1:1"}
	m.set.Store(&set)
	return newFilter(inner, m, hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Info, JSONFormat: true}))
}

// Every case of the validation tables, sent by hashicorp/raft's own TCP transport naming a
// member, survives the real transport's decoding and the membership check: the good ones
// reach raft's side of the filter (the consumer channel, or the heartbeat fast path), the
// bad ones are refused by the validation alone, answered with its reason, counted, and
// logged once for their one sender.
func TestFilterRefusesMalformedRPCsFromTheTransport(t *testing.T) {
	log := hclog.NewNullLogger()
	recv, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 10*time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	var buf clustertest.Buffer
	f := memberFilter(recv, &buf)
	var delivered atomic.Int64
	answer := func(rpc raft.RPC) {
		delivered.Add(1)
		if rpc.Reader != nil {
			_, _ = io.Copy(io.Discard, rpc.Reader)
		}
		rpc.Respond(emptyResponse(rpc.Command), nil)
	}
	f.SetHeartbeatHandler(answer)
	f.start()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case rpc := <-f.Consumer():
				answer(rpc)
			case <-f.done:
				return
			}
		}
	}()
	send, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 10*time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		send.CloseStreams()
		_ = send.Close()
		_ = f.Close()
		<-done
	})
	id, addr := raft.ServerID("me"), recv.LocalAddr()

	var good, bad int64
	check := func(name string, err error, want string) {
		t.Helper()
		switch {
		case want == "":
			good++
			if err != nil {
				t.Errorf("%s: %v, want it delivered", name, err)
			}
		default:
			bad++
			if err == nil || !strings.Contains(err.Error(), "malformed Raft RPC") || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %v, want the malformed-RPC refusal with %q", name, err, want)
			}
		}
	}
	for _, c := range appendEntriesCases() {
		var resp raft.AppendEntriesResponse
		check("AppendEntries, "+c.name, send.AppendEntries(id, addr, c.req, &resp), c.bad)
	}
	for _, c := range candidateCases {
		var vr raft.RequestVoteResponse
		check("RequestVote, "+c.name, send.RequestVote(id, addr, &raft.RequestVoteRequest{RPCHeader: header("leader"),
			Term: c.term, LastLogIndex: c.lastIndex, LastLogTerm: c.lastTerm}, &vr), c.bad)
		var pr raft.RequestPreVoteResponse
		check("RequestPreVote, "+c.name, send.RequestPreVote(id, addr, &raft.RequestPreVoteRequest{RPCHeader: header("leader"),
			Term: c.term, LastLogIndex: c.lastIndex, LastLogTerm: c.lastTerm}, &pr), c.bad)
	}
	for _, c := range installSnapshotCases() {
		if c.req.Size > 1<<20 {
			continue // the pure table has it; its data is not sent here
		}
		var resp raft.InstallSnapshotResponse
		data := bytes.Repeat([]byte{'s'}, int(max(c.req.Size, 0)))
		check("InstallSnapshot, "+c.name, send.InstallSnapshot(id, addr, c.req, &resp, bytes.NewReader(data)), c.bad)
	}
	if bad == 0 || good == 0 {
		t.Fatalf("%d good and %d bad cases: the tables are empty", good, bad)
	}
	if got := delivered.Load(); got != good {
		t.Errorf("%d RPCs reached raft's side, want the %d good ones", got, good)
	}
	if got := f.Malformed(); got != uint64(bad) {
		t.Errorf("Malformed() = %d, want %d", got, bad)
	}
	if got := f.Refused(); got != uint64(bad) {
		t.Errorf("Refused() = %d, want %d", got, bad)
	}
	if n := buf.Count("refusing a malformed Raft RPC from a member"); n != 1 {
		t.Errorf("the refusals of one sender were logged %d times, want once:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), `"sender":"leader"`) || !strings.Contains(buf.String(), `"reason":"malformed Raft RPC: `) {
		t.Errorf("the refusal's log line lacks its sender or reason:\n%s", buf.String())
	}
}

// crasher is an RPC from a member that makes hashicorp/raft v1.8.0 panic when nothing stands
// in front of it; panic is a part of raft's panic message.
type crasher struct {
	name, panic string
	send        func(tr raft.Transport, id raft.ServerID, addr raft.ServerAddress) error
}

func crashers() []crasher {
	appendOne := func(e *raft.Log) func(raft.Transport, raft.ServerID, raft.ServerAddress) error {
		return func(tr raft.Transport, id raft.ServerID, addr raft.ServerAddress) error {
			var resp raft.AppendEntriesResponse
			req := appendReq(1, 0, 0, e)
			req.LeaderCommitIndex = 1000
			return tr.AppendEntries(id, addr, req, &resp)
		}
	}
	snapshot := func(conf []byte) func(raft.Transport, raft.ServerID, raft.ServerAddress) error {
		return func(tr raft.Transport, id raft.ServerID, addr raft.ServerAddress) error {
			var resp raft.InstallSnapshotResponse
			req := snapReq()
			req.Configuration, req.Size = conf, 4
			return tr.InstallSnapshot(id, addr, req, &resp, bytes.NewReader([]byte("snap")))
		}
	}
	return []crasher{
		{"InstallSnapshot version 1 without a configuration", "failed to decode configuration: EOF", snapshot(nil)},
		{"InstallSnapshot with a configuration that does not decode", "failed to decode configuration", snapshot([]byte("garbage"))},
		{"AppendEntries with a configuration entry that does not decode", "failed to decode configuration",
			appendOne(&raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("garbage")})},
		{"AppendEntries with a nil entry", "nil pointer dereference", appendOne(nil)},
		{"AppendEntries with an entry of an unknown type, committed", "unrecognized log type",
			appendOne(&raft.Log{Index: 1, Term: 1, Type: 42})},
		{"AppendEntries with an entry far ahead of an empty log, committed", "log not found", appendOne(cmdEntry(1000, 1))},
	}
}

// startRaft starts a raft node, never bootstrapped (as one waiting to be added is), with
// in-memory stores on trans.
func startRaft(trans raft.Transport, log hclog.Logger) (*raft.Raft, error) {
	conf := raft.DefaultConfig()
	conf.LocalID = "me"
	conf.Logger = log
	f, err := fsm.NewFSM(0)
	if err != nil {
		return nil, err
	}
	store := raft.NewInmemStore()
	return raft.NewRaft(conf, f, store, store, raft.NewInmemSnapshotStore(), trans)
}

const crashCaseEnv = "LATCH_RAFTNODE_CRASH_CASE"

// The panics are real: each crasher, sent to raft with no filter in front of it, ends the
// process with raft's panic. The test runs each in a child process (this test binary again).
func TestRaftCrashesOnThemWithoutTheFilter(t *testing.T) {
	if name := os.Getenv(crashCaseEnv); name != "" {
		crashChild(name) // never returns
	}
	for _, c := range crashers() {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestRaftCrashesOnThemWithoutTheFilter$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashCaseEnv+"="+c.name)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := runBounded(t, cmd, time.Minute)
			if err == nil || !strings.Contains(out.String(), "panic: ") || !strings.Contains(out.String(), c.panic) {
				t.Fatalf("raft with no filter in front: exit %v, want a panic with %q; output:\n%s", err, c.panic, out.String())
			}
		})
	}
}

// runBounded runs cmd and kills it if it runs past d.
func runBounded(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the child process ran past %v", d)
		return nil
	}
}

// crashChild sends the crasher name to a raft node with nothing in front of it and exits 0
// if the process is still alive 10 s later.
func crashChild(name string) {
	for _, c := range crashers() {
		if c.name != name {
			continue
		}
		addr, trans := raft.NewInmemTransportWithTimeout("me", 10*time.Second)
		_, sender := raft.NewInmemTransportWithTimeout("leader", 10*time.Second)
		sender.Connect(addr, trans)
		if _, err := startRaft(trans, hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Warn})); err != nil {
			os.Stderr.WriteString("start raft: " + err.Error() + "\n")
			os.Exit(3)
		}
		err := c.send(sender, "me", addr)
		os.Stderr.WriteString("the RPC returned: " + errString(err) + "\n")
		time.Sleep(10 * time.Second)
		os.Stderr.WriteString("still alive\n")
		os.Exit(0)
	}
	os.Stderr.WriteString("no crash case " + name + "\n")
	os.Exit(3)
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// The same RPCs with the filter in front: each is refused with its reason, and raft keeps
// running and takes a correct AppendEntries afterwards.
func TestFilterKeepsRaftAliveOnThem(t *testing.T) {
	addr, trans := raft.NewInmemTransportWithTimeout("me", 10*time.Second)
	_, sender := raft.NewInmemTransportWithTimeout("leader", 10*time.Second)
	sender.Connect(addr, trans)
	var buf clustertest.Buffer
	f := memberFilter(trans, &buf)
	r, err := startRaft(f.transport(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	f.start()
	t.Cleanup(func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		_ = f.Close()
		_ = sender.Close()
	})
	for _, c := range crashers() {
		if err := c.send(sender, "me", addr); err == nil || !strings.Contains(err.Error(), "malformed Raft RPC") {
			t.Fatalf("%s: %v, want the malformed-RPC refusal", c.name, err)
		}
	}
	if got := f.Malformed(); got != uint64(len(crashers())) {
		t.Errorf("Malformed() = %d, want %d", got, len(crashers()))
	}
	var resp raft.AppendEntriesResponse
	// "me" joins as a nonvoter: it never campaigns, so its state stays Follower.
	good := appendReq(1, 0, 0, &raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration,
		Data: confBytes(server(raft.Voter, "leader", "leader"), server(raft.Nonvoter, "me", "me"))})
	good.LeaderCommitIndex = 1
	if err := sender.AppendEntries("me", addr, good, &resp); err != nil || !resp.Success {
		t.Fatalf("a correct AppendEntries after the refusals: %v, success %v", err, resp.Success)
	}
	if st := r.State(); st != raft.Follower {
		t.Fatalf("raft is %v after the refusals, want Follower", st)
	}
	if got := r.LastIndex(); got != 1 {
		t.Fatalf("raft's last index %d, want 1 (the correct entry alone)", got)
	}
}
