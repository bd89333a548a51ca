package raftnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	oc "github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
)

func TestSingleNodeBootstrap(t *testing.T) {
	const floor = 1000
	c := newCluster(t, 1, func(cfg *Config) { cfg.TokenFloor = floor })
	tn := c.leader()
	n := tn.n
	if got := tn.leads.Load(); got != 1 {
		t.Fatalf("OnLeader called %d times, want 1", got)
	}
	// The floor entry is applied before leadership is reported.
	if got := n.FSM().LastToken(); got != floor {
		t.Fatalf("last token after the floor entry = %d, want %d", got, floor)
	}

	if tok := grant(t, n, "a"); tok != floor+1 {
		t.Fatalf("first token = %d, want %d", tok, floor+1)
	}
	r, err := submit(t, n, acquire("a"))
	if err != nil || r.Kind != fsm.Held || r.Holder.Token != floor+1 {
		t.Fatalf("second acquire of a: %+v %v, want Held by %d", r, err, floor+1)
	}
	r, err = submit(t, n, release("a", floor+1))
	if err != nil || r.Kind != fsm.Released {
		t.Fatalf("release a: %+v %v", r, err)
	}
	if tok := grant(t, n, "b"); tok != floor+2 {
		t.Fatalf("next token = %d, want %d", tok, floor+2)
	}

	// An invalid command is answered without a round through raft.
	before, idx := n.Status().Commands, n.raft.LastIndex()
	_, err = submit(t, n, fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("c")}) // lease 0
	if !errors.Is(err, oc.Refused) || !errors.Is(err, fsm.ErrInvalidCommand) || !exactlyOneOutcome(err) {
		t.Fatalf("invalid command: %v, want Refused wrapping fsm.ErrInvalidCommand", err)
	}
	if k, _ := oc.Of(err); k != oc.Refused {
		t.Fatalf("invalid command: outcome %v, want Refused", k)
	}
	if n.Status().Commands != before || n.raft.LastIndex() != idx {
		t.Fatal("invalid command was proposed")
	}

	// A group is one entry: a release and the grant to the next waiter share a sync.
	entries := n.Status().Entries
	ch := make(chan outcome, 2)
	cb := func(r fsm.Result, err error) { ch <- outcome{r, err} }
	n.SubmitGroup(fsm.Proposal{Cmd: release("b", floor+2), Done: cb}, fsm.Proposal{Cmd: acquire("b"), Done: cb})
	for _, want := range []fsm.ResultKind{fsm.Released, fsm.Granted} {
		o := <-ch
		if o.err != nil || o.res.Kind != want {
			t.Fatalf("group: %+v %v, want %v", o.res, o.err, want)
		}
	}
	if got := n.Status().Entries - entries; got != 1 {
		t.Fatalf("group took %d entries, want 1", got)
	}

	// Groups that cannot be proposed are rejected whole.
	big := make([]fsm.Proposal, n.cfg.MaxBatch+1)
	errs := make(chan error, len(big))
	for i := range big {
		big[i] = fsm.Proposal{Cmd: acquire("x"), Done: func(_ fsm.Result, err error) { errs <- err }}
	}
	n.SubmitGroup(big...)
	for range big {
		if err := <-errs; !errors.Is(err, oc.Refused) || !exactlyOneOutcome(err) || !errors.Is(err, ErrGroupTooLarge) {
			t.Fatalf("oversized group: %v", err)
		}
	}
	n.SubmitGroup(fsm.Proposal{Cmd: acquire("y"), Done: func(_ fsm.Result, err error) { errs <- err }},
		fsm.Proposal{Cmd: fsm.Command{Kind: 99, Key: []byte("z")}, Done: func(_ fsm.Result, err error) { errs <- err }})
	if err := <-errs; !errors.Is(err, ErrGroupRejected) {
		t.Fatalf("valid command of a bad group: %v", err)
	}
	if err := <-errs; !errors.Is(err, fsm.ErrInvalidCommand) {
		t.Fatalf("invalid command of a bad group: %v", err)
	}
	if _, held := n.FSM().Holder([]byte("y")); held {
		t.Fatal("a command of a rejected group was applied")
	}

	eventually(t, "ready", func() bool { return n.Ready() == nil })
	st := n.Status()
	if st.State != "Leader" || !st.Leading || st.LeaderID != tn.id || st.LeaderAddr != tn.addr ||
		st.LastToken != floor+3 || st.Keys != 1 || len(st.Peers) != 1 || st.Peers[0].Suffrage != "voter" {
		t.Fatalf("status: %+v", st)
	}
	meta, err := n.Snapshot(context.Background())
	if err != nil || meta.Index == 0 {
		t.Fatalf("snapshot: %+v %v", meta, err)
	}

	c.shutdown(tn)
	if got := tn.follow.Load(); got != 1 {
		t.Fatalf("OnFollower called %d times after shutdown, want 1", got)
	}
	// Shutdown is idempotent, and a shut-down node rejects commands (asynchronously).
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if _, err := submit(t, n, acquire("late")); !errors.Is(err, oc.Unavailable) || !errors.Is(err, ErrShutdown) {
		t.Fatalf("submit after shutdown: %v", err)
	}
	if err := n.Ready(); !errors.Is(err, ErrShutdown) {
		t.Fatalf("ready after shutdown: %v", err)
	}
}

// A leader raises the token counter to a TokenFloor raised in its config since the last run.
func TestFloorRaisedOnRestart(t *testing.T) {
	floor := uint64(0)
	c := newCluster(t, 1, func(cfg *Config) { cfg.TokenFloor = floor })
	tn := c.leader()
	if tok := grant(t, tn.n, "a"); tok != 1 {
		t.Fatalf("first token = %d, want 1", tok)
	}
	c.shutdown(tn)

	floor = 500
	c.restart(tn)
	tn = c.leader()
	if tok := grant(t, tn.n, "b"); tok != 501 {
		t.Fatalf("token after raising the floor = %d, want 501", tok)
	}
	if h, ok := tn.n.FSM().Holder([]byte("a")); !ok || h.Token != 1 {
		t.Fatalf("holder of a after restart: %+v %v", h, ok)
	}
	c.shutdown(tn)

	floor = 10 // below the counter: nothing to do, the counter never goes down
	c.restart(tn)
	tn = c.leader()
	if tok := grant(t, tn.n, "c"); tok != 502 {
		t.Fatalf("token after lowering the floor = %d, want 502", tok)
	}
}

// A second Open on the same directory fails within the bolt lock timeout with a clear error,
// and the directory opens again once the first node has shut down.
func TestOpenDataDirInUse(t *testing.T) {
	c := newCluster(t, 1, nil)
	tn := c.leader()

	tr := c.transport("")
	cfg := c.config(&tnode{id: "intruder", dir: tn.dir}, tr, true)
	start := time.Now()
	n, err := Open(cfg)
	elapsed := time.Since(start)
	_ = tr.Close()
	if err == nil {
		_ = n.Shutdown(context.Background())
		t.Fatal("second Open on the same DataDir succeeded")
	}
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), filepath.Join(tn.dir, "raft.db")) {
		t.Fatalf("second Open: %v, want ErrDataDirInUse naming raft.db", err)
	}
	if elapsed > boltOpenTimeout+clustertest.Bound { // it gave up, it did not hang
		t.Fatalf("second Open took %v to fail", elapsed)
	}
	t.Logf("second Open failed after %v: %v", elapsed.Round(time.Millisecond), err)

	c.shutdown(tn)
	c.restart(tn)
	c.leader()
	if _, err := os.Stat(filepath.Join(tn.dir, "snapshots")); err != nil {
		t.Fatalf("snapshot directory: %v", err)
	}
}

// With the results held up in a done callback and a window of one entry, commands pile
// up to MaxQueue; the next is rejected with ErrQueueFull, and not on the caller's goroutine.
func TestQueueFull(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.MaxBatch, cfg.MaxQueue, cfg.MaxInFlight = 4, 4, 1 })
	n := c.leader().n

	gate, entered := make(chan struct{}), make(chan struct{})
	n.Submit(acquire("first"), func(fsm.Result, error) {
		close(entered)
		<-gate // holds up raft's FSM goroutine, and with it every later result
	})
	<-entered
	// The callbacks take mu, which the test holds while it submits: a done called on
	// Submit's goroutine would deadlock here.
	var mu sync.Mutex
	outs := make(chan outcome, 5)
	mu.Lock()
	for i := range 5 {
		n.Submit(acquire(string(rune('a'+i))), func(r fsm.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			outs <- outcome{r, err}
		})
	}
	mu.Unlock()
	// The one over MaxQueue is rejected at once, while the results of the rest still wait
	// for the entry ahead of them: a rejection waits for nothing.
	o := <-outs
	if !errors.Is(o.err, oc.Unavailable) || !errors.Is(o.err, ErrQueueFull) {
		t.Fatalf("first answer: %+v %v, want the queue-full rejection", o.res, o.err)
	}
	close(gate)
	granted, full := 0, 1
	for range 4 {
		o := <-outs
		switch {
		case o.err == nil && o.res.Kind == fsm.Granted:
			granted++
		case errors.Is(o.err, oc.Unavailable) && errors.Is(o.err, ErrQueueFull):
			full++
		default:
			t.Fatalf("unexpected outcome %+v %v", o.res, o.err)
		}
	}
	if granted != 4 || full != 1 {
		t.Fatalf("granted %d, queue full %d; want 4 and 1", granted, full)
	}
}

// An empty node started without Bootstrap or InitialCluster is in no configuration, is not
// ready and rejects commands as not leader.
func TestEmptyNodeWaitsToJoin(t *testing.T) {
	// An apply timeout no passing run comes near: a node that waited on raft instead of
	// rejecting at once would answer only after it.
	c := &tcluster{t: t, log: testLogger(t), mut: func(cfg *Config) { cfg.ApplyTimeout = clustertest.Bound }}
	t.Cleanup(c.shutdownAll)
	tn := c.add()
	if err := tn.n.Ready(); err == nil || !strings.Contains(err.Error(), "not a member yet") {
		t.Fatalf("ready: %v", err)
	}
	start := time.Now()
	_, err := submit(t, tn.n, acquire("a"))
	if !errors.Is(err, oc.Unavailable) || !errors.Is(err, oc.NotLeader) || time.Since(start) >= clustertest.Bound {
		t.Fatalf("submit on an empty node: %v after %v", err, time.Since(start))
	}
	if err := tn.n.AddVoter("x", "127.0.0.1:1"); !errors.Is(err, oc.Unavailable) || !errors.Is(err, oc.NotLeader) {
		t.Fatalf("AddVoter on a non-leader: %v", err)
	}
}
