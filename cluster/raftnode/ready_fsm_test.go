package raftnode

import (
	"testing"

	"github.com/hashicorp/raft"

	"github.com/latchd/latch/fsm"
)

// Readiness waits for the lock table, not for raft's count of entries handed to it: with
// raft's applied index at the end of the log, a node whose table has not applied the last
// command entries is not caught up; entries raft never hands to the table (no-ops,
// configurations) after the table's index do not hold it back, nor do entries a snapshot the
// node holds covers; an entry missing from the log (a snapshot still to restore) does.
func TestFSMCaughtUpCountsTheTable(t *testing.T) {
	f := walFixture{dataDir: t.TempDir()}
	w := f.open(t, 0)
	defer f.close(t, w)
	table, err := fsm.NewFSM(0)
	if err != nil {
		t.Fatal(err)
	}
	grant := func(key string) []byte {
		b, err := fsm.AppendBatch(nil, []fsm.Command{{Kind: fsm.CmdAcquire, Key: []byte(key), Lease: 30}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// 1 command, 2 no-op, 3 command, 4 configuration, 5 no-op
	logs := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: grant("a")},
		{Index: 2, Term: 1, Type: raft.LogNoop},
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: grant("b")},
		{Index: 4, Term: 1, Type: raft.LogConfiguration},
		{Index: 5, Term: 2, Type: raft.LogNoop},
	}
	if err := w.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	n := &Node{fsm: table, wal: w}
	if at, ok := n.fsmCaughtUp(5); ok || at != 0 {
		t.Fatalf("nothing applied: caught up to 5 = %v (at %d)", ok, at)
	}
	table.Apply(logs[0])
	if _, ok := n.fsmCaughtUp(2); !ok {
		t.Fatal("entry 1 applied, 2 a no-op: not caught up to 2")
	}
	if _, ok := n.fsmCaughtUp(5); ok {
		t.Fatal("command 3 not applied: caught up to 5")
	}
	table.Apply(logs[2])
	if at, ok := n.fsmCaughtUp(5); !ok || at != 3 {
		t.Fatalf("every command applied: caught up to 5 = %v (at %d)", ok, at)
	}
	if _, ok := n.fsmCaughtUp(9); ok {
		t.Fatal("entries 6-9 are not in the log: caught up to 9")
	}

	// A restored backup: the table says the index of the cluster it came from (0 here), and
	// the snapshot this node installed covers the log up to 3.
	restored, err := fsm.NewFSM(0)
	if err != nil {
		t.Fatal(err)
	}
	r := &Node{fsm: restored, wal: w, promise: newKeeper(f.dataDir, promise{SnapshotIndex: 3})}
	if _, ok := r.fsmCaughtUp(5); !ok {
		t.Fatal("every entry after the installed snapshot (3) is a no-op or a configuration: not caught up to 5")
	}
}
