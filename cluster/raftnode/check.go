package raftnode

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// ErrDataDirBroken: the data directory holds raft state that raft could not start from (an
// unreadable log segment, a log with a gap behind the newest readable snapshot, snapshots
// that all fail their checksum). Errors wrapping it name the file and the way back.
var ErrDataDirBroken = errors.New("raftnode: the data directory cannot be started from")

// wayBack is what an operator can do about a broken data directory, for error messages.
func wayBack(dir string) string {
	return fmt.Sprintf("move %s aside (keep it for a bug report) and start the node again with its usual flags: "+
		"a member of a cluster that still has a quorum rejoins empty and catches up from the leader; "+
		"if no other member holds the data, run `latch recover` on the most up-to-date surviving data directory, "+
		"or restore a backup with `latch snapshot restore`", dir)
}

// broken wraps cause as ErrDataDirBroken for dir, naming what failed and the way back.
func broken(dir, what string, cause error) error {
	return fmt.Errorf("%w: %s: %v; %s", ErrDataDirBroken, what, cause, wayBack(dir))
}

// snapshotPick is the snapshot raft starts from: the newest one whose file passes its
// checksum (raft's FileSnapshotStore.Open verifies it), as raft's own restore picks it.
type snapshotPick struct {
	meta    *raft.SnapshotMeta // nil: none (then the log must start at index 1)
	rc      io.ReadCloser      // the opened snapshot, for the caller to read and close; nil with meta
	skipped []string           // newer snapshots that failed to open, with why
}

// pickSnapshot opens the newest readable snapshot in st. It fails only when there are
// snapshots and none of them can be opened (raft refuses to start then too).
func pickSnapshot(st *stores) (snapshotPick, error) {
	var p snapshotPick
	dir := st.dir
	metas, err := st.snaps.List()
	if err != nil {
		return p, broken(dir, "list the snapshots in "+filepath.Join(dir, "snapshots"), err)
	}
	for _, m := range metas {
		meta, rc, err := st.snaps.Open(m.ID)
		if err != nil {
			p.skipped = append(p.skipped, fmt.Sprintf("%s: %v", filepath.Join(dir, "snapshots", m.ID), err))
			continue
		}
		p.meta, p.rc = meta, rc
		return p, nil
	}
	if len(metas) > 0 {
		return p, broken(dir, "no snapshot can be read", errors.New(fmt.Sprint(p.skipped)))
	}
	return p, nil
}

// check reads what raft.NewRaft reads at start, the way it reads it: the newest readable
// snapshot, then every log entry after it up to the last. raft panics on a log entry it
// cannot read; check turns that into ErrDataDirBroken naming the data directory. A newer
// snapshot that fails its checksum is logged and passed over, as raft does, provided the
// log still covers everything after the older one.
func (st *stores) check(log hclog.Logger) error {
	dir := st.dir
	p, err := pickSnapshot(st)
	if err != nil {
		return err
	}
	var snapIndex uint64
	if p.meta != nil {
		snapIndex = p.meta.Index
		_ = p.rc.Close()
	}
	for _, s := range p.skipped {
		log.Warn("a snapshot fails its checksum; starting from an older one", "snapshot", s,
			"using_index", snapIndex)
	}
	walDir := filepath.Join(dir, "wal")
	first, err := st.wal.FirstIndex()
	if err != nil {
		return broken(dir, "read the first index of the raft log in "+walDir, err)
	}
	last, err := st.wal.LastIndex()
	if err != nil {
		return broken(dir, "read the last index of the raft log in "+walDir, err)
	}
	if last == 0 || last <= snapIndex {
		return nil // nothing after the snapshot: raft reads no entry
	}
	if first > snapIndex+1 {
		what := fmt.Sprintf("the raft log in %s starts at index %d, but the newest readable snapshot ends at %d", walDir, first, snapIndex)
		if len(p.skipped) > 0 {
			what += fmt.Sprintf(" (newer snapshots failed their checksum: %v)", p.skipped)
		}
		return broken(dir, what, raft.ErrLogNotFound)
	}
	var e raft.Log
	for i := snapIndex + 1; i <= last; i++ {
		if err := st.wal.GetLog(i, &e); err != nil {
			return broken(dir, fmt.Sprintf("read entry %d of the raft log in %s (entries %d to %d)", i, walDir, first, last), err)
		}
	}
	return nil
}
