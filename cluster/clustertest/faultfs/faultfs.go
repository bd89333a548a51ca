package faultfs

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/latchd/latch/cluster/clustertest"
)

// FS is a mounted fault filesystem: Dir is the mount point, Backing the directory that
// holds its files. Its methods may be called from any goroutine.
type FS struct {
	Dir     string
	Backing string

	fsyncErr atomic.Int32 // a syscall.Errno; 0: fsyncs succeed
	delayMin atomic.Int64 // nanoseconds
	delayMax atomic.Int64
	off      atomic.Bool  // PowerOff: nothing is written or synced any more
	strict   atomic.Bool  // StrictNames: a new name is durable at its directory's fsync only
	fsyncs   atomic.Int64 // fsyncs asked for, failed ones included
	failed   atomic.Int64 // fsyncs answered with fsyncErr

	mu     sync.Mutex
	files  map[uint64]*track // by the backing file's inode number
	server *fuse.Server
	conn   uint32 // the FUSE connection's number (/sys/fs/fuse/connections/N)
}

// track is what a disk would hold of one file after a power loss, besides what it holds now.
type track struct {
	synced  int64  // the size as of its last successful fsync
	undo    []undo // the bytes under [0, synced) overwritten since, oldest first
	created bool   // created since Mount, and its name is not durable yet
	dir     uint64 // the inode of the directory its name is in (when created)
}

// undo is a range's content before a write changed it.
type undo struct {
	off int64
	old []byte
}

// Cut says what a PowerCut took away.
type Cut struct {
	Reverted []string // files put back to their last fsync (paths relative to Dir), with how much
	Removed  []string // files whose names were never durable
}

func (c Cut) String() string {
	return fmt.Sprintf("reverted %d files %v, removed %d %v", len(c.Reverted), c.Reverted, len(c.Removed), c.Removed)
}

// Available says why this machine cannot mount a fault filesystem ("" when it can).
func Available() string {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "no /dev/fuse (the fuse kernel module): " + err.Error()
	}
	if os.Geteuid() != 0 {
		return "not root: the fault filesystem mounts with mount(2)"
	}
	for _, name := range []string{"fusermount3", "fusermount"} {
		if _, err := exec.LookPath(name); err == nil {
			return ""
		}
	}
	return "no fusermount or fusermount3 (install fuse3)"
}

// Mount mounts a fault filesystem at dir (created if missing) over a new backing directory,
// with no fault switched on, and unmounts it when the test ends. It skips the test when the
// machine cannot mount one (Available), except under CI=true, where it fails.
func Mount(t testing.TB, dir string) *FS {
	t.Helper()
	if why := Available(); why != "" {
		clustertest.SkipUnlessCI(t, "a fault filesystem (FUSE) cannot be mounted here: "+why)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f := &FS{Dir: dir, Backing: t.TempDir(), files: map[uint64]*track{}}
	if err := f.mount(); err != nil {
		t.Fatalf("mount a fault filesystem at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		began := time.Now()
		if err := f.unmount(5 * time.Second); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		if d := time.Since(began); d > time.Second {
			t.Logf("unmounting %s took %v", dir, d.Round(time.Millisecond))
		}
	})
	return f
}

func (f *FS) mount() error {
	var st syscall.Stat_t
	if err := syscall.Stat(f.Backing, &st); err != nil {
		return err
	}
	lr := &gofs.LoopbackRoot{Path: f.Backing, Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: &gofs.LoopbackNode{RootData: lr}, ffs: f}
	lr.RootNode = root
	server, err := gofs.Mount(f.Dir, root, &gofs.Options{MountOptions: fuse.MountOptions{
		FsName:        "faultfs:" + f.Backing,
		Name:          "faultfs",
		DirectMount:   true, // root: mount(2) itself; fusermount is the fallback
		DisableXAttrs: true,
	}})
	if err != nil {
		return err
	}
	var mst syscall.Stat_t
	if err := syscall.Stat(f.Dir, &mst); err != nil {
		_ = server.Unmount()
		return err
	}
	f.mu.Lock()
	f.server, f.conn = server, unix.Minor(mst.Dev) // a FUSE mount's device: major 0, minor the connection
	f.mu.Unlock()
	return nil
}

// unmount unmounts, retrying while files are still open (a killed process's last releases
// reach the filesystem after it is reaped), and falls back to a lazy unmount after d.
//
// go-fuse's Unmount returns once its request loops end, which is when the kernel drops the
// connection. A process in another mount namespace (ip netns exec, which other tests on
// the machine run) holds a copy of every mount there was when it started, and keeps the
// connection alive after our unmount for as long as it runs. So when Unmount has not
// returned within 2 s, the connection is aborted (fusectl's abort file): nothing may use the
// mount any more (the caller made sure), the copies then answer ENOTCONN, and the loops end.
func (f *FS) unmount(d time.Duration) error {
	f.mu.Lock()
	server, conn := f.server, f.conn
	f.server = nil
	f.mu.Unlock()
	if server == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() {
		var err error
		for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
			if err = server.Unmount(); err == nil || time.Now().After(end) {
				break
			}
		}
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Second):
		abort(conn)
		select {
		case err = <-done:
		case <-time.After(d + 5*time.Second):
			return fmt.Errorf("the FUSE connection %d did not end after its abort", conn)
		}
	}
	if err == nil {
		return nil
	}
	for _, lazy := range [][]string{{"fusermount3", "-u", "-z"}, {"fusermount", "-u", "-z"}, {"umount", "-l"}} {
		if exec.Command(lazy[0], append(lazy[1:], f.Dir)...).Run() == nil {
			abort(conn)
			return nil
		}
	}
	return err
}

// abort aborts FUSE connection conn, mounting fusectl at /sys/fs/fuse/connections first if
// it is not there.
func abort(conn uint32) {
	const ctl = "/sys/fs/fuse/connections"
	path := fmt.Sprintf("%s/%d/abort", ctl, conn)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		_ = syscall.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	_ = os.WriteFile(path, []byte("1"), 0o200)
}

// FailFsync makes every fsync and fdatasync answer errno from now on; 0 ends the fault.
func (f *FS) FailFsync(errno syscall.Errno) { f.fsyncErr.Store(int32(errno)) }

// DelayFsync makes every fsync sleep a random time in [min, max] first; zeros end it.
func (f *FS) DelayFsync(min, max time.Duration) {
	f.delayMin.Store(int64(min))
	f.delayMax.Store(int64(max))
}

// Fsyncs is how many fsyncs were asked for since Mount, and how many of them failed.
func (f *FS) Fsyncs() (all, failed int64) { return f.fsyncs.Load(), f.failed.Load() }

// fault is called before each fsync: it sleeps the delay and returns the error to answer.
func (f *FS) fault() syscall.Errno {
	f.fsyncs.Add(1)
	if lo, hi := f.delayMin.Load(), f.delayMax.Load(); hi > 0 {
		d := lo
		if hi > lo {
			d += rand.Int64N(hi - lo + 1)
		}
		time.Sleep(time.Duration(d))
	}
	if f.off.Load() { // the power went while it slept: it never completes
		f.failed.Add(1)
		return syscall.EIO
	}
	if e := syscall.Errno(f.fsyncErr.Load()); e != 0 {
		f.failed.Add(1)
		return e
	}
	return 0
}

// get returns the track of the file open as fd (inode ino), starting one with everything
// it holds now counted as durable. Under mu.
func (f *FS) get(fd int, ino uint64) *track {
	tr := f.files[ino]
	if tr == nil {
		var st syscall.Stat_t
		_ = syscall.Fstat(fd, &st)
		tr = &track{synced: st.Size}
		f.files[ino] = tr
	}
	return tr
}

// save keeps the bytes of [off, end) of the file open as fd that lie below its durable
// size, before they change. Under mu.
func (f *FS) save(fd int, tr *track, off, end int64) {
	end = min(end, tr.synced)
	if off >= end {
		return
	}
	old := make([]byte, end-off)
	n, err := syscall.Pread(fd, old, off)
	if errors.Is(err, syscall.EBADF) { // opened write-only: read it through another descriptor
		if r, oerr := os.Open(fmt.Sprintf("/proc/self/fd/%d", fd)); oerr == nil {
			n, _ = r.ReadAt(old, off) // short at the file's end: the rest was never there
			r.Close()
		}
	}
	// A short read (the file is shorter than its durable size, after a truncation that is
	// itself in the undo log) keeps what there was; the older record puts back the rest.
	n = max(n, 0)
	tr.undo = append(tr.undo, undo{off: off, old: old[:n]})
}

// changing records that [off, off+n) of the file open as fd (inode ino) is about to change.
func (f *FS) changing(fd int, ino uint64, off, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.save(fd, f.get(fd, ino), off, off+n)
}

// truncating records that the file open as fd (inode ino) is about to get size size.
func (f *FS) truncating(fd int, ino uint64, size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tr := f.get(fd, ino)
	f.save(fd, tr, size, tr.synced)
}

// created records a file created in the directory dir: its name is not durable yet.
func (f *FS) created(ino, dir uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[ino] = &track{created: true, dir: dir}
}

// synced records a successful fsync of the file open as fd (inode ino): all it holds is
// durable, its name too.
func (f *FS) synced(fd int, ino uint64) {
	var st syscall.Stat_t
	_ = syscall.Fstat(fd, &st)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead() { // the power went before it completed
		return
	}
	tr := &track{synced: st.Size}
	if old := f.files[ino]; old != nil && old.created && f.strict.Load() {
		tr.created, tr.dir = true, old.dir
	}
	f.files[ino] = tr
}

// StrictNames switches to POSIX's letter for new names: a file created from now on keeps
// its name through a power cut only once its directory was fsynced after the create (an
// fsync of the file itself does not do it, as it does on ext4 and XFS). Off by default.
func (f *FS) StrictNames(on bool) { f.strict.Store(on) }

// dirSynced records a successful fsync of the directory dir: the names in it are durable.
func (f *FS) dirSynced(dir uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead() {
		return
	}
	for _, tr := range f.files {
		if tr.created && tr.dir == dir {
			tr.created = false
		}
	}
}

// renamed records that the file ino is now named in the directory dir.
func (f *FS) renamed(ino, dir uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tr := f.files[ino]; tr != nil && tr.created {
		tr.dir = dir
	}
}

// PowerOff is the moment the power goes: from now on every write, fsync and change of a
// name fails with EIO and changes nothing, also those already on their way (an fsync that
// sleeps its DelayFsync never completes). Call it right before killing the processes that
// use the mount (which may notice the EIO first), then PowerCut, which turns the power on
// again. Without it, a request a killed process had sent still completes after the kill.
func (f *FS) PowerOff() { f.off.Store(true) }

// dead reports whether the power is off (then the caller answers EIO and does nothing).
func (f *FS) dead() bool { return f.off.Load() }

// PowerCut is a power loss: every file goes back to its content as of its last fsync, and
// files whose names never became durable go (the model: doc.go). Every process with a file
// open on the mount must be gone (PowerOff first, then kill them); PowerCut unmounts,
// reverts, turns the power on and mounts again.
func (f *FS) PowerCut() (Cut, error) {
	if err := f.unmount(10 * time.Second); err != nil {
		return Cut{}, fmt.Errorf("unmount for the power cut (is a process still using %s?): %w", f.Dir, err)
	}
	f.off.Store(true)
	cut, err := f.revert()
	if err != nil {
		return cut, err
	}
	f.off.Store(false)
	return cut, f.mount()
}

// revert puts the backing directory back to what is durable, and forgets the tracks.
func (f *FS) revert() (Cut, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cut Cut
	done := map[uint64]bool{}
	err := filepath.WalkDir(f.Backing, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		ino := info.Sys().(*syscall.Stat_t).Ino
		tr := f.files[ino]
		if tr == nil || done[ino] {
			return nil
		}
		done[ino] = true
		rel, _ := filepath.Rel(f.Backing, path)
		if tr.created {
			cut.Removed = append(cut.Removed, rel)
			return os.Remove(path)
		}
		if len(tr.undo) == 0 && info.Size() == tr.synced {
			return nil
		}
		file, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer file.Close()
		var bytes int
		for _, u := range slices.Backward(tr.undo) {
			if _, err := file.WriteAt(u.old, u.off); err != nil {
				return err
			}
			bytes += len(u.old)
		}
		if err := file.Truncate(tr.synced); err != nil {
			return err
		}
		cut.Reverted = append(cut.Reverted, fmt.Sprintf("%s (size %d -> %d, %d bytes put back)", rel, info.Size(), tr.synced, bytes))
		return nil
	})
	f.files = map[uint64]*track{}
	return cut, err
}
