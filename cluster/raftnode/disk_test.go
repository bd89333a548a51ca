package raftnode

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/latchd/latch/cluster/clustertest"
)

// smallDisk mounts a tmpfs of size bytes for the test and returns its path.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	clustertest.NeedRoot(t, "mounts a size-limited tmpfs to fill")
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes a file in dir until the filesystem is full, and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{1}, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !noSpace(err) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return path
		}
	}
}

// On a real full filesystem, a log append that fails for lack of space makes the node say
// "disk full" (Ready's first check), the log keeps every entry it had, and an append after
// space was freed clears it; a snapshot that cannot be created leaves no directory behind.
func TestDiskFullIsSaidAndClears(t *testing.T) {
	dir := smallDisk(t, "4m")
	f := walFixture{dataDir: dir}
	w := f.open(t, 256<<10)
	defer f.close(t, w)
	var logged bytes.Buffer
	d := &diskFull{log: hclog.New(&hclog.LoggerOptions{Output: &logged})}
	l := promisedLog{LogStore: w, k: newKeeper(dir, promise{}), disk: d}
	entry := func(i uint64) []*raft.Log {
		return []*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 32<<10)}}
	}
	if err := l.StoreLogs(entry(1)); err != nil {
		t.Fatal(err)
	}
	filler := fill(t, dir)
	var stored uint64 = 1
	var err error
	for i := uint64(2); i < 1000; i++ { // bounded: 4 MiB holds fewer than 130 such entries
		if err = l.StoreLogs(entry(i)); err != nil {
			break
		}
		stored = i
	}
	if !noSpace(err) {
		t.Fatalf("appends on a full disk: %v, want no space", err)
	}
	if e := d.Err(); e == nil || !strings.Contains(e.Error(), "disk full") || !errors.Is(e, syscall.ENOSPC) {
		t.Fatalf("Err after a failed append: %v", e)
	}
	if !strings.Contains(logged.String(), "disk full") {
		t.Fatalf("nothing logged: %q", logged.String())
	}
	if last, _ := w.LastIndex(); last != stored {
		t.Fatalf("last index %d after the failed append, want %d", last, stored)
	}
	var got raft.Log
	if err := w.GetLog(stored, &got); err != nil || got.Data[0] != byte(stored) {
		t.Fatalf("entry %d after the failed append: %v", stored, err)
	}

	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ss := promisedSnapshots{SnapshotStore: snaps, k: newKeeper(dir, promise{}), log: hclog.NewNullLogger(), disk: d, dir: dir, mu: new(sync.Mutex)}
	if _, err := ss.Create(raft.SnapshotVersionMax, stored, 1, raft.Configuration{}, 1, nil); err == nil {
		t.Fatal("a snapshot was created on a full disk")
	}
	if left := snapshotsInProgress(dir); len(left) != 0 {
		t.Fatalf("a failed snapshot left %v", left)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entry(stored + 1)); err != nil {
		t.Fatalf("append after space was freed: %v", err)
	}
	if e := d.Err(); e != nil {
		t.Fatalf("Err after a good append: %v", e)
	}
	if !strings.Contains(logged.String(), "disk space back") {
		t.Fatalf("the recovery was not logged: %q", logged.String())
	}
}

// A start removes the directories of snapshots that were cut short, and nothing else.
func TestUnfinishedSnapshotsRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	st, err := openStores(dir, hclog.NewNullLogger(), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"2-10-1.tmp", "2-20-2.tmp", "2-30-3"} {
		if err := os.MkdirAll(filepath.Join(dir, "snapshots", name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	removeUnfinishedSnapshots(dir, map[string]bool{"2-20-2.tmp": true}, hclog.NewNullLogger())
	entries, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "2-20-2.tmp 2-30-3" {
		t.Fatalf("left %v, want the skipped one and the finished one", names)
	}
	if st, err = openStores(dir, hclog.NewNullLogger(), false); err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if left := snapshotsInProgress(dir); len(left) != 0 {
		t.Fatalf("openStores left %v", left)
	}
}
