package faultfs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, path string, off int64, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(data), off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func syncDir(t *testing.T, dir string) error {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return d.Sync()
}

func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "(missing)"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A power cut keeps exactly what was fsynced: file data as of its last fsync, names that
// the file's or the directory's fsync made durable; it drops the rest.
func TestPowerCutKeepsWhatWasSynced(t *testing.T) {
	f := Mount(t, filepath.Join(t.TempDir(), "mnt"))
	d := f.Dir
	write(t, filepath.Join(d, "old"), 0, "durable", true)
	if err := syncDir(t, d); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d, "old"), 0, "D", false)        // an overwrite, never synced
	write(t, filepath.Join(d, "old"), 7, " tail", false)    // an append, never synced
	write(t, filepath.Join(d, "unsynced"), 0, "x", false)   // created, nothing synced
	write(t, filepath.Join(d, "filesync"), 0, "kept", true) // its own fsync makes its name durable
	if err := os.Mkdir(filepath.Join(d, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d, "sub", "dirsync"), 0, "lost data", false)
	if err := syncDir(t, filepath.Join(d, "sub")); err != nil { // the name, not the data
		t.Fatal(err)
	}
	// A rewrite through rename, as promised.json is written: durable when synced first.
	write(t, filepath.Join(d, "p.tmp"), 0, "new promise", true)
	if err := os.Rename(filepath.Join(d, "p.tmp"), filepath.Join(d, "p")); err != nil {
		t.Fatal(err)
	}
	// A truncation below the synced size, then a regrowth: both undone.
	write(t, filepath.Join(d, "trunc"), 0, "0123456789", true)
	if err := os.Truncate(filepath.Join(d, "trunc"), 3); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d, "trunc"), 5, "zz", false)
	if got := content(t, filepath.Join(d, "old")); got != "Durable tail" {
		t.Fatalf("before the cut old holds %q", got)
	}

	cut, err := f.PowerCut()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cut: %s", cut)
	for name, want := range map[string]string{
		"old": "durable", "unsynced": "(missing)", "filesync": "kept", "sub/dirsync": "",
		"p": "new promise", "p.tmp": "(missing)", "trunc": "0123456789",
	} {
		if got := content(t, filepath.Join(d, name)); got != want {
			t.Errorf("%s after the cut: %q, want %q", name, got, want)
		}
	}
	// The mount works as before, and a second cut with nothing new changes nothing.
	write(t, filepath.Join(d, "old"), 0, "after", true)
	if cut, err = f.PowerCut(); err != nil || len(cut.Reverted)+len(cut.Removed) != 0 {
		t.Fatalf("a second cut: %v, %s", err, cut)
	}
	if got := content(t, filepath.Join(d, "old")); got != "afterle" {
		t.Fatalf("old after the second cut: %q", got)
	}
}

// A failed fsync answers the error and makes nothing durable; a delayed one takes at least
// the delay.
func TestFsyncFaults(t *testing.T) {
	f := Mount(t, filepath.Join(t.TempDir(), "mnt"))
	path := filepath.Join(f.Dir, "log")
	write(t, path, 0, "first", true)
	f.FailFsync(syscall.EIO)
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte("second"), 5); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync with the fault on: %v, want EIO", err)
	}
	if err := syscall.Fdatasync(int(file.Fd())); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fdatasync with the fault on: %v, want EIO", err)
	}
	if err := syncDir(t, f.Dir); !errors.Is(err, syscall.EIO) {
		t.Fatalf("directory fsync with the fault on: %v, want EIO", err)
	}
	file.Close()
	if got := content(t, path); got != "firstsecond" {
		t.Fatalf("after the failed fsync the file reads %q", got)
	}
	if all, failed := f.Fsyncs(); failed != 3 || all < 4 {
		t.Fatalf("fsyncs %d, failed %d", all, failed)
	}
	f.FailFsync(0)
	f.DelayFsync(150*time.Millisecond, 200*time.Millisecond)
	began := time.Now()
	write(t, filepath.Join(f.Dir, "slow"), 0, "x", true)
	if d := time.Since(began); d < 150*time.Millisecond {
		t.Fatalf("a delayed fsync took %v", d)
	}
	f.DelayFsync(0, 0)
	if _, err := f.PowerCut(); err != nil {
		t.Fatal(err)
	}
	if got := content(t, path); got != "first" {
		t.Fatalf("after a cut the file whose fsync failed reads %q, want what the last good fsync kept", got)
	}
}

// Reads through a shared mmap (how bolt reads raft.db) see what was written with pwrite,
// and what a power cut put back; a preallocated file (how raft-wal makes segments) keeps its
// size and loses only the bytes not synced.
func TestMmapAndPreallocation(t *testing.T) {
	f := Mount(t, filepath.Join(t.TempDir(), "mnt"))
	path := filepath.Join(f.Dir, "seg")
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	if err := syscall.Fallocate(int(file.Fd()), 0, 0, size); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	if _, err := file.WriteAt([]byte("synced"), 4096); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte("pending"), 8192); err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(file.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	if !bytes.Equal(m[4096:4102], []byte("synced")) || !bytes.Equal(m[8192:8199], []byte("pending")) {
		t.Fatalf("mmap reads %q and %q", m[4096:4102], m[8192:8199])
	}
	syscall.Munmap(m)
	file.Close()
	if _, err := f.PowerCut(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != size || string(b[4096:4102]) != "synced" || !bytes.Equal(b[8192:8199], make([]byte, 7)) {
		t.Fatalf("after the cut: size %d, %q, %q", len(b), b[4096:4102], b[8192:8199])
	}
}

// PowerOff is the moment the power goes: an fsync sleeping its delay then never completes,
// and nothing written after it reaches the disk.
func TestPowerOffStopsWhatIsUnderWay(t *testing.T) {
	f := Mount(t, filepath.Join(t.TempDir(), "mnt"))
	path := filepath.Join(f.Dir, "log")
	write(t, path, 0, "kept", true)
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := file.WriteAt([]byte(" in flight"), 4); err != nil {
		t.Fatal(err)
	}
	f.DelayFsync(time.Second, time.Second)
	synced := make(chan error, 1)
	go func() { synced <- file.Sync() }()
	time.Sleep(200 * time.Millisecond) // the fsync sleeps in the filesystem
	f.PowerOff()
	if err := <-synced; !errors.Is(err, syscall.EIO) {
		t.Fatalf("an fsync under way when the power went: %v, want EIO", err)
	}
	if _, err := file.WriteAt([]byte("!"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a write after the power went: %v, want EIO", err)
	}
	file.Close()
	f.DelayFsync(0, 0)
	if _, err := f.PowerCut(); err != nil {
		t.Fatal(err)
	}
	if got := content(t, path); got != "kept" {
		t.Fatalf("after the cut: %q, want what was synced before the power went", got)
	}
	write(t, path, 0, "K", true) // the power is back
	if got := content(t, path); got != "Kept" {
		t.Fatalf("a write after the cut: %q", got)
	}
}

// With StrictNames, a new file's own fsync keeps its data but not its name; its directory's
// fsync keeps the name.
func TestStrictNames(t *testing.T) {
	f := Mount(t, filepath.Join(t.TempDir(), "mnt"))
	f.StrictNames(true)
	if err := os.Mkdir(filepath.Join(f.Dir, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.Dir, "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.Dir, "a", "f"), 0, "synced, its dir not", true)
	write(t, filepath.Join(f.Dir, "b", "f"), 0, "both synced", true)
	if err := syncDir(t, filepath.Join(f.Dir, "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.PowerCut(); err != nil {
		t.Fatal(err)
	}
	if got := content(t, filepath.Join(f.Dir, "a", "f")); got != "(missing)" {
		t.Errorf("a/f after the cut: %q, want it gone", got)
	}
	if got := content(t, filepath.Join(f.Dir, "b", "f")); got != "both synced" {
		t.Errorf("b/f after the cut: %q", got)
	}
}

// A process in another mount namespace holds a copy of the mount (ip netns exec does that);
// unmounting and a power cut still end within seconds.
func TestUnmountWithACopyInAnotherNamespace(t *testing.T) {
	f := Mount(t, filepath.Join(t.TempDir(), "mnt"))
	write(t, filepath.Join(f.Dir, "x"), 0, "x", true)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1)")
	}
	copyHolder := exec.Command("unshare", "--mount", "sleep", "60")
	if err := copyHolder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { copyHolder.Process.Kill(); copyHolder.Wait() }()
	time.Sleep(300 * time.Millisecond) // the namespace is made, with its copy of the mount
	began := time.Now()
	if _, err := f.PowerCut(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Fatalf("a power cut took %v with a copy of the mount elsewhere", d)
	}
	t.Logf("power cut with a copy of the mount in another namespace: %v", time.Since(began).Round(time.Millisecond))
	if got := content(t, filepath.Join(f.Dir, "x")); got != "x" {
		t.Fatalf("after the cut: %q", got)
	}
}
