package raftnode

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// TestRefusesALogInRaftDB: a data directory whose Raft log lives in raft.db (written before
// the log moved to the WAL) must not be opened as if it were empty, which would forget every
// committed entry; Open refuses it and says what to do.
func TestRefusesALogInRaftDB(t *testing.T) {
	dir := t.TempDir()
	old, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.StoreLog(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	old.Close()

	_, tr := raft.NewInmemTransport("")
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Transport, cfg.Bootstrap = "n1", dir, tr, true
	cfg.Logger = testLogger(t)
	n, err := Open(cfg)
	if err == nil {
		n.Shutdown(t.Context())
		t.Fatal("Open used a data dir whose Raft log is in raft.db")
	}
	if !strings.Contains(err.Error(), "older latch") || errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("error %q: want one that names the older layout", err)
	}
}
