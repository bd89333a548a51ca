package raftnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// openFails opens tn's data directory again, which must fail (the test fails with why
// otherwise), and returns Open's error.
func openFails(t *testing.T, c *tcluster, tn *tnode, why string) error {
	t.Helper()
	tr := c.transport(tn.addr)
	defer tr.Close()
	n, err := Open(c.config(tn, tr, true))
	if err == nil {
		n.Shutdown(context.Background())
		t.Fatal(why)
	}
	return err
}

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
	want := grantKeys(t, tn.n, "a%d", 5)
	snapshotNow(t, tn.n, tn.dir)
	grantMore(t, tn.n, want, "b%d", 5)
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
	grantKeys(t, tn.n, "a%d", 5)
	snapshotNow(t, tn.n, tn.dir)
	grantKeys(t, tn.n, "b%d", 20)
	newest := snapshotNow(t, tn.n, tn.dir)
	c.shutdown(tn)
	corrupt(t, filepath.Join(newest, "state.bin"))

	err := openFails(t, c, tn, "Open started from a snapshot whose log is gone")
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
	grantKeys(t, tn.n, "k%d", 20)
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

	wantBroken(t, openFails(t, c, tn, "Open started from a log segment with a garbage header"), tn.dir)
}

// A log that ends before the snapshot this node installed is what a crash between raft's
// snapshot install and its clearing of the log leaves: cleared, the node starts. When the
// node promised entries after the snapshot too, the start is refused, and the refused
// directory, like one Inspect reads, keeps its log: nothing is cleared before every check
// has passed (once the log was cleared, then the start refused).
func TestALogBehindTheInstalledSnapshotIsClearedOnlyByAStart(t *testing.T) {
	c := newCluster(t, 1, nil)
	tn := c.leader()
	want := grantKeys(t, tn.n, "a%d", 5)
	c.shutdown(tn)
	wal, old := filepath.Join(tn.dir, "wal"), filepath.Join(t.TempDir(), "wal")
	if err := os.CopyFS(old, os.DirFS(wal)); err != nil {
		t.Fatal(err)
	}
	// plantOld puts the old log back behind the newer snapshot and returns its segments.
	plantOld := func() []string {
		t.Helper()
		if err := os.RemoveAll(wal); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(wal, os.DirFS(old)); err != nil {
			t.Fatal(err)
		}
		segs, _ := filepath.Glob(filepath.Join(wal, "*.wal"))
		return segs
	}

	c.restart(tn)
	c.leader()
	grantMore(t, tn.n, want, "b%d", 5)
	snapshotNow(t, tn.n, tn.dir)
	last := tn.n.FSM().LastToken()
	c.shutdown(tn)
	plantOld()
	c.restart(tn) // nothing promised after the snapshot: the log is cleared
	c.leader()
	c.converged(want, last)

	grantMore(t, tn.n, want, "c%d", 5) // promised after the snapshot
	c.shutdown(tn)
	planted := plantOld()
	wantBroken(t, openFails(t, c, tn, "Open started from a log that lost entries promised after the snapshot"),
		tn.dir, "acknowledged entries up to")
	if segs, _ := filepath.Glob(filepath.Join(wal, "*.wal")); !slices.Equal(segs, planted) {
		t.Fatalf("the refused Open changed the log: segments %v, planted %v", segs, planted)
	}
	ds, err := Inspect(tn.dir, nil)
	if err != nil || len(ds.Damage) == 0 || ds.State.LastToken != last {
		t.Fatalf("Inspect: %+v, %v; want the snapshot's state (last token %d) and the damage", ds, err, last)
	}
	if segs, _ := filepath.Glob(filepath.Join(wal, "*.wal")); !slices.Equal(segs, planted) {
		t.Fatalf("Inspect changed the log: segments %v, planted %v", segs, planted)
	}
}
