package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// diskFull tracks whether the data directory has run out of space (ENOSPC, or EDQUOT for a
// quota). raft's own handling keeps the log whole: a follower whose append fails answers the
// leader that it did not store the entries, a leader whose append fails steps down and fails
// those proposals, and a snapshot that cannot be written is retried later. What latch adds is
// that the node says so: one line when the disk fills and one when writes succeed again, and
// Ready reports "disk full" in between, so that /readyz takes the node out of service. The
// node needs no restart: the next append that succeeds (raft retries them) clears it.
//
// It is set by a failed log append, snapshot or raft.db write, and cleared only by an append
// or a snapshot that was written whole: a promise file's few bytes may still fit on a disk
// that cannot take a log segment.
type diskFull struct {
	log  hclog.Logger
	stop *failStop // a failed write that is no full disk may stop the node (failstop.go)

	full atomic.Bool // err != nil: lets an append that succeeds skip mu (every append calls wrote)

	mu    sync.Mutex
	err   error     // the write that failed; nil while the disk takes writes
	since time.Time // when err was first seen
}

// noSpace reports whether err is the filesystem's "no space" (or "over quota").
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// failed records a write of what that failed with err; it returns err.
// An I/O error or a failed fsync does not return: it stops the node (failStop).
func (d *diskFull) failed(what string, err error) error {
	d.stop.check(what, err)
	if err == nil || !noSpace(err) {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == nil {
		d.since = time.Now()
		d.log.Error("disk full: the data dir takes no more writes; this node stores no log entries and takes no snapshots until space is freed, and then comes back by itself",
			"write", what, "error", err)
	}
	d.err = fmt.Errorf("%s: %w", what, err)
	d.full.Store(true)
	return err
}

// wrote records a log append or snapshot that succeeded.
func (d *diskFull) wrote() {
	if !d.full.Load() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		d.log.Info("disk space back: the data dir takes writes again", "full_for", time.Since(d.since).Round(time.Millisecond))
		d.err = nil
		d.full.Store(false)
	}
}

// Err is nil unless the disk is full, then "disk full since ...: ...".
func (d *diskFull) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == nil {
		return nil
	}
	return fmt.Errorf("disk full since %s (%v ago): %w; free space in the data dir and the node comes back by itself",
		d.since.UTC().Format(time.RFC3339), time.Since(d.since).Round(time.Second), d.err)
}

// removeUnfinishedSnapshots removes the directories raft's file snapshot store leaves behind
// when a snapshot was cut short (a crash, or a full disk while it wrote the metadata): their
// names end in ".tmp", raft never reads or removes them, and each holds space. At a start no
// snapshot is being written, so all of them go; skip names those in progress.
func removeUnfinishedSnapshots(dir string, skip map[string]bool, log hclog.Logger) {
	entries, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasSuffix(name, ".tmp") || skip[name] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, "snapshots", name)); err != nil {
			log.Warn("cannot remove an unfinished snapshot", "name", name, "error", err)
			continue
		}
		log.Info("removed an unfinished snapshot", "name", name)
	}
}

// snapshotsInProgress lists the unfinished snapshot directories there are now.
func snapshotsInProgress(dir string) map[string]bool {
	entries, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	out := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() && strings.HasSuffix(e.Name(), ".tmp") {
			out[e.Name()] = true
		}
	}
	return out
}
