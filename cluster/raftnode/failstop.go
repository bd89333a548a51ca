package raftnode

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// ErrDiskFailed is what Config.FailStop is called with: the data directory failed a write
// or an fsync with an I/O error. Open returns it too, for a start whose reads or writes of
// the data directory fail so (cmd/latch exits 74 for both).
var ErrDiskFailed = errors.New("the data directory's disk failed")

// failStop ends the node when its disk fails (fail-stop, as PostgreSQL and etcd learned to).
// After an fsync that failed, the kernel may have dropped the pages it could not write and
// marked them clean: a later fsync then succeeds without them, and the node would go on with
// a log and votes that are not on the disk it reports them on. raft alone would go on: a
// follower answers the leader that it did not store the entries, and stores them again on
// the next try; a leader steps down and stays a candidate. So the first such error stops
// the node: one log line, then Config.FailStop, before raft sees the error. A full disk
// (ENOSPC, EDQUOT from a write) is not such an error: nothing was lost, diskFull (disk.go)
// says so and the node goes on once space is freed.
type failStop struct {
	log  hclog.Logger
	hook func(error) // Config.FailStop; nil panics
	once sync.Once
}

// diskFailed reports whether err says the disk failed: any failed fsync or fdatasync (even
// one that reports ENOSPC: the data it did not sync may be gone), an I/O error (EIO) from any
// call, or a filesystem gone read-only (EROFS: what ext4 does after errors).
func diskFailed(err error) bool {
	var pe *os.PathError
	if errors.As(err, &pe) && (pe.Op == "sync" || pe.Op == "fsync" || pe.Op == "fdatasync") {
		return true
	}
	var se *os.SyscallError
	if errors.As(err, &se) && (se.Syscall == "fsync" || se.Syscall == "fdatasync") {
		return true
	}
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EROFS)
}

// check stops the node if err says the disk failed while it did what; else it returns.
// It does not return after a disk failure: the hook ends the process, and a second failure
// on another goroutine waits for that.
// A nil failStop never stops.
func (f *failStop) check(what string, err error) {
	if f == nil || err == nil || !diskFailed(err) {
		return
	}
	stop := fmt.Errorf("%w: %s: %w", ErrDiskFailed, what, err)
	f.once.Do(func() {
		f.log.Error("disk failure: stopping this node at once; its log and votes can no longer be trusted. "+
			"Replace or repair the disk, then start it again: it checks its data directory and catches up "+
			"(or refuses with exit 74: then wipe the data directory and let it rejoin)", "write", what, "error", err)
		if f.hook != nil {
			f.hook(stop)
		}
	})
	panic(stop) // FailStop returned (it must not), or there is none
}
