package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// Which errors stop the node: any failed fsync, EIO and EROFS from anything; not a full disk
// from a write, not other errors.
func TestDiskFailed(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&os.PathError{Op: "sync", Path: "wal/1.wal", Err: syscall.EIO}, true},
		{&os.PathError{Op: "sync", Path: "wal/1.wal", Err: syscall.ENOSPC}, true}, // a sync that lost data
		{fmt.Errorf("wrapped: %w", &os.PathError{Op: "write", Path: "raft.db", Err: syscall.EIO}), true},
		{syscall.EIO, true}, // bolt returns fdatasync's errno as it is
		{os.NewSyscallError("fdatasync", syscall.EINVAL), true},
		{&os.PathError{Op: "open", Path: "raft.db", Err: syscall.EROFS}, true},
		{&os.PathError{Op: "write", Path: "wal/1.wal", Err: syscall.ENOSPC}, false}, // disk full: diskFull
		{syscall.EDQUOT, false},
		{errors.New("non-monotonic log entries"), false},
		{nil, false},
	} {
		if got := c.err != nil && diskFailed(c.err); got != c.want {
			t.Errorf("diskFailed(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A disk failure logs one line, calls the hook once with ErrDiskFailed, and never returns;
// anything else returns; a nil failStop never stops.
func TestFailStopCheck(t *testing.T) {
	var logged bytes.Buffer
	var got []error
	f := &failStop{log: hclog.New(&hclog.LoggerOptions{Output: &logged}), hook: func(err error) { got = append(got, err) }}
	f.check("append", nil)
	f.check("append", &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC})
	(*failStop)(nil).check("append", syscall.EIO)
	stopped := func(err error) (v any) {
		defer func() { v = recover() }()
		f.check("append to the raft log", err)
		return nil
	}
	for range 2 {
		if v := stopped(&os.PathError{Op: "sync", Path: "wal/1.wal", Err: syscall.EIO}); v == nil {
			t.Fatal("check returned after a failed fsync")
		}
	}
	if len(got) != 1 || !errors.Is(got[0], ErrDiskFailed) || !errors.Is(got[0], syscall.EIO) || !strings.Contains(got[0].Error(), "append to the raft log") {
		t.Fatalf("hook called with %v", got)
	}
	if n := strings.Count(logged.String(), "disk failure: stopping this node at once"); n != 1 {
		t.Fatalf("logged %d times:\n%s", n, logged.String())
	}
}

// A start that meets a failing disk says so (ErrDiskFailed, the disk first in the way back),
// not that the files are damaged.
func TestBrokenByADiskFailure(t *testing.T) {
	err := broken("/data", "open /data/raft.db", &os.PathError{Op: "open", Path: "/data/raft.db", Err: syscall.EIO})
	if !errors.Is(err, ErrDiskFailed) || errors.Is(err, ErrDataDirBroken) || !strings.Contains(err.Error(), "repair or replace it") {
		t.Fatalf("broken by EIO: %v", err)
	}
	err = broken("/data", "open /data/raft.db", errors.New("invalid database"))
	if !errors.Is(err, ErrDataDirBroken) || errors.Is(err, ErrDiskFailed) {
		t.Fatalf("broken by damage: %v", err)
	}
}
