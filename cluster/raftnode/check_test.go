package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/latchd/latch/fsm"
)

// snapshotNow takes a snapshot on n and returns its directory under dataDir/snapshots.
func snapshotNow(t *testing.T, n *Node, dataDir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testApply)
	defer cancel()
	meta, err := n.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dataDir, "snapshots", meta.ID)
}

// corrupt flips bytes in the middle of path, leaving its size alone.
func corrupt(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 3; i < len(b)/3+16 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// wantBroken checks that err is ErrDataDirBroken and tells the operator where and what to do.
func wantBroken(t *testing.T, err error, dir string, mentions ...string) {
	t.Helper()
	if !errors.Is(err, ErrDataDirBroken) {
		t.Fatalf("error %v, want ErrDataDirBroken", err)
	}
	t.Log(err)
	for _, s := range append([]string{dir, "latch recover", "start the node again"}, mentions...) {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error does not mention %q:\n%v", s, err)
		}
	}
}

// A newest snapshot that fails its checksum is passed over while the log still covers the
// older one (raft does the same), and the node comes back with every lock.
func TestOpenPassesOverACorruptSnapshotTheLogCovers(t *testing.T) {
	c := newCluster(t, 1, nil)
	tn := c.leader()
	want := map[string]fsm.Token{}
	for i := range 5 {
		want[fmt.Sprintf("a%d", i)] = grant(t, tn.n, fmt.Sprintf("a%d", i))
	}
	snapshotNow(t, tn.n, tn.dir)
	for i := range 5 {
		want[fmt.Sprintf("b%d", i)] = grant(t, tn.n, fmt.Sprintf("b%d", i))
	}
	newest := snapshotNow(t, tn.n, tn.dir)
	last := tn.n.FSM().LastToken()
	c.shutdown(tn)
	corrupt(t, filepath.Join(newest, "state.bin"))

	c.restart(tn)
	c.leader()
	c.converged(want, last)
}

// With the log compacted behind the newest snapshot and that snapshot corrupt, raft would
// start from the older one and panic on the missing entries ("log not found"); Open refuses
// with one error that names the snapshot and the way back instead.
func TestOpenRefusesACorruptSnapshotWithACompactedLog(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.TrailingLogs = 1 })
	tn := c.leader()
	for i := range 5 {
		grant(t, tn.n, fmt.Sprintf("a%d", i))
	}
	snapshotNow(t, tn.n, tn.dir)
	for i := range 20 {
		grant(t, tn.n, fmt.Sprintf("b%d", i))
	}
	newest := snapshotNow(t, tn.n, tn.dir)
	c.shutdown(tn)
	corrupt(t, filepath.Join(newest, "state.bin"))

	tr := c.transport(tn.addr)
	defer tr.Close()
	n, err := Open(c.config(tn, tr, true))
	if err == nil {
		n.Shutdown(context.Background())
		t.Fatal("Open started from a snapshot whose log is gone")
	}
	wantBroken(t, err, tn.dir, filepath.Base(newest), "checksum")
	if _, err := Inspect(tn.dir, nil); !errors.Is(err, ErrDataDirBroken) {
		t.Fatalf("Inspect: %v, want ErrDataDirBroken", err)
	}
}

// A log segment that cannot be read (here: its header overwritten) is one clear error that
// names the data directory, never a panic.
func TestOpenRefusesAnUnreadableLog(t *testing.T) {
	c := newCluster(t, 1, nil)
	tn := c.leader()
	for i := range 20 {
		grant(t, tn.n, fmt.Sprintf("k%d", i))
	}
	c.shutdown(tn)
	segs, err := filepath.Glob(filepath.Join(tn.dir, "wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no wal segment in %s: %v", tn.dir, err)
	}
	f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(strings.Repeat("x", 32)), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()

	tr := c.transport(tn.addr)
	defer tr.Close()
	n, err := Open(c.config(tn, tr, true))
	if err == nil {
		n.Shutdown(context.Background())
		t.Fatal("Open started from a log segment with a garbage header")
	}
	wantBroken(t, err, tn.dir)
}
