package raftnode

import (
	"errors"
	"os"
	"testing"

	"github.com/latchd/latch/fsm"
)

// A cluster that lost two of three nodes comes back from the survivor's disk: Recover makes
// it a one-voter cluster with its locks and a raised counter, and a wiped node joins it.
func TestRecoverLostQuorum(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader()
	want := grantKeys(t, l.n, "k%d", 10)
	last := l.n.FSM().LastToken()
	c.converged(want, last)
	c.shutdownAll()

	survivor := c.nodes[1]
	ds, err := Inspect(survivor.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ds.State.LastToken != last || ds.State.Keys != len(want) || len(ds.Servers) != 3 || ds.LastIndex == 0 {
		t.Fatalf("inspect: %+v", ds)
	}
	if _, err := Inspect(t.TempDir(), nil); err == nil {
		t.Fatal("inspect of an empty directory succeeded")
	}

	floor := uint64(last) + 500
	if _, _, err := Recover(RecoverOptions{DataDir: survivor.dir, ID: survivor.id, Addr: survivor.addr}); err != nil {
		// a zero floor is allowed: it keeps the survivor's counter
		t.Fatalf("recover with floor 0: %v", err)
	}
	before, after, err := Recover(RecoverOptions{DataDir: survivor.dir, ID: survivor.id, Addr: survivor.addr, TokenFloor: floor})
	if err != nil {
		t.Fatal(err)
	}
	if before.State.LastToken != last || after.State.LastToken != fsm.Token(floor) || after.State.Keys != len(want) {
		t.Fatalf("recover: before %+v after %+v", before, after)
	}
	if len(after.Servers) != 1 || after.Servers[0].ID != survivor.id || after.Servers[0].Addr != survivor.addr {
		t.Fatalf("recovered configuration %+v, want only %s", after.Servers, survivor.id)
	}

	// Only the survivor starts: it elects itself.
	saved := c.nodes
	c.nodes = []*tnode{survivor}
	c.restart(survivor)
	ld := c.leader()
	c.converged(want, fsm.Token(floor))
	if tok := grant(t, ld.n, "after"); tok != fsm.Token(floor)+1 {
		t.Fatalf("first grant after recovery = %d, want %d", tok, floor+1)
	}
	want["after"] = fsm.Token(floor) + 1

	// A wiped former member joins the recovered cluster and catches up.
	wiped := saved[0]
	if err := os.RemoveAll(wiped.dir); err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, wiped)
	peers := c.peers
	c.peers = nil
	c.restart(wiped)
	c.peers = peers
	if err := ld.n.AddVoter(wiped.id, wiped.addr); err != nil {
		t.Fatal(err)
	}
	c.converged(want, fsm.Token(floor)+1)
	c.nodes = append(c.nodes, saved[2]) // stays down; listed for cleanup only
}

// Recover refuses a running node's directory and a floor out of range, and changes nothing.
func TestRecoverRefuses(t *testing.T) {
	c := newCluster(t, 1, nil)
	l := c.leader()
	grant(t, l.n, "k")
	if _, _, err := Recover(RecoverOptions{DataDir: l.dir, ID: l.id, Addr: l.addr}); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("recover of a running node's directory: %v, want ErrDataDirInUse", err)
	}
	c.shutdownAll()
	if _, _, err := Recover(RecoverOptions{DataDir: l.dir, ID: l.id, Addr: l.addr, TokenFloor: uint64(fsm.MaxToken) + 1}); !errors.Is(err, fsm.ErrFloorRange) {
		t.Fatalf("floor above MaxToken: %v, want ErrFloorRange", err)
	}
	if _, _, err := Recover(RecoverOptions{DataDir: t.TempDir(), ID: "x", Addr: "127.0.0.1:1"}); err == nil {
		t.Fatal("recover of an empty directory succeeded")
	}
}
