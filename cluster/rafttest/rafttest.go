// Package rafttest is the in-memory raft network and the real on-disk stores that latch's
// raft tests run on: raftnode's test cluster (raftnode.Node over these transports, its own
// stores in t.TempDir) and fsm's (raw raft with fsm.FSM). It is imported only by _test.go
// files. Tests about TCP itself (the peer filter against a stranger's connection, a restart
// that rebinds its port) use raft's TCP transport instead.
package rafttest

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Net connects raft in-memory transports all to all: every transport it makes can reach
// every other one it made, by address, until that one is taken Down. The zero Net is ready.
type Net struct {
	mu   sync.Mutex
	trs  map[raft.ServerAddress]*raft.InmemTransport
	down map[raft.ServerAddress]bool
	next int
}

// Transport makes a transport at addr (a fresh address when addr is empty), replacing one
// made earlier at addr (a restart), and connects it both ways to the others.
func (n *Net) Transport(addr raft.ServerAddress) *raft.InmemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.trs == nil {
		n.trs, n.down = map[raft.ServerAddress]*raft.InmemTransport{}, map[raft.ServerAddress]bool{}
	}
	if addr == "" {
		n.next++
		addr = raft.ServerAddress(fmt.Sprintf("inmem-%d", n.next))
	}
	_, tr := raft.NewInmemTransport(addr)
	for a, other := range n.trs {
		if a != addr && !n.down[a] {
			tr.Connect(a, other)
			other.Connect(addr, tr)
		}
	}
	n.trs[addr] = tr
	delete(n.down, addr)
	return tr
}

// Down disconnects every other transport from addr and addr from every other, as if its
// process had stopped (or its host were cut off): RPCs either way fail at once, as a refused
// TCP connection does, rather than time out. Transports made later do not reach it either,
// until a Transport at addr brings it back.
func (n *Net) Down(addr raft.ServerAddress) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down == nil {
		n.down = map[raft.ServerAddress]bool{}
	}
	n.down[addr] = true
	if tr := n.trs[addr]; tr != nil {
		tr.DisconnectAll()
	}
	for a, other := range n.trs {
		if a != addr {
			other.Disconnect(addr)
		}
	}
}

// Stores are a raft node's log, stable and snapshot stores on disk.
type Stores struct {
	Log    *raftboltdb.BoltStore // the log and the stable store
	Snaps  *raft.FileSnapshotStore
	Dir    string
	closed bool
}

// NewStores opens a node's stores in a new directory under t.TempDir; they close at the end
// of the test, or at Close. A node restarted on the same Stores finds what it wrote.
func NewStores(t testing.TB) *Stores {
	t.Helper()
	dir := t.TempDir()
	log, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatalf("open the raft log in %s: %v", dir, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		_ = log.Close()
		t.Fatalf("open the snapshot store in %s: %v", dir, err)
	}
	s := &Stores{Log: log, Snaps: snaps, Dir: dir}
	t.Cleanup(func() { s.Close(t) })
	return s
}

// Close closes the log store, once.
func (s *Stores) Close(t testing.TB) {
	if s.closed {
		return
	}
	s.closed = true
	if err := s.Log.Close(); err != nil {
		t.Errorf("close the raft log in %s: %v", s.Dir, err)
	}
}
