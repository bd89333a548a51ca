package raftnode

import (
	"bytes"
	"io"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The stores raft is given wrap the real ones and tell the keeper (promise.go) what became
// durable. None adds a sync to an append.

// Keys raft keeps in its StableStore (hashicorp/raft raft.go).
var (
	keyCurrentTerm  = []byte("CurrentTerm")
	keyLastVoteTerm = []byte("LastVoteTerm")
	keyLastVoteCand = []byte("LastVoteCand")
)

// promisedStable is raft.db as raft sees it: a term or vote is written to the promise right
// after raft.db has it, before raft acts on it. raft.db holds the vote durably either way,
// so a failed promise write (a full disk) is logged, not returned: raft panics when it
// cannot save a term, and the promise is written again every promiseInterval until it
// holds. A start that finds raft.db ahead of the promise checks term and vote only.
type promisedStable struct {
	raft.StableStore
	k    *keeper
	log  hclog.Logger
	disk *diskFull
}

func (s promisedStable) Set(key, val []byte) error {
	if err := s.StableStore.Set(key, val); err != nil {
		return s.disk.failed("write the term and vote to raft.db", err)
	}
	if !bytes.Equal(key, keyLastVoteCand) {
		return nil
	}
	term, err := s.StableStore.GetUint64(keyLastVoteTerm)
	if err != nil {
		return err
	}
	return s.promise(func(p *promise) { p.VoteTerm, p.Vote = term, string(val) })
}

func (s promisedStable) SetUint64(key []byte, val uint64) error {
	if err := s.StableStore.SetUint64(key, val); err != nil {
		return s.disk.failed("write the term and vote to raft.db", err)
	}
	if !bytes.Equal(key, keyCurrentTerm) {
		return nil
	}
	return s.promise(func(p *promise) { p.Term = val })
}

func (s promisedStable) promise(fn func(p *promise)) error {
	if err := s.k.change(fn); err != nil {
		s.disk.stop.check("write the term and vote to "+promiseFile, err)
		s.log.Error("cannot write the term and vote to the promise; raft.db holds them", "error", err)
	}
	return nil
}

// promisedLog is the raft log as raft sees it. An append moves the promised end once it is
// durable (raft-wal has fsynced it when StoreLogs returns); the keeper writes it later. A
// deletion of the tail lowers the promise on disk first, then deletes: raft only clears
// entries that were never committed, when a leader of a newer term replaces them.
type promisedLog struct {
	raft.LogStore
	k    *keeper
	disk *diskFull
}

// IsMonotonic passes raft-wal's answer on (raft.MonotonicLogStore): raft then clears the
// whole log after installing a snapshot instead of keeping a gap.
func (l promisedLog) IsMonotonic() bool {
	m, ok := l.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (l promisedLog) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

func (l promisedLog) StoreLogs(es []*raft.Log) error {
	if err := l.LogStore.StoreLogs(es); err != nil {
		return l.disk.failed("append to the raft log", err)
	}
	l.disk.wrote()
	if n := len(es); n > 0 {
		last := es[n-1]
		l.k.set(func(p *promise) { p.LastIndex, p.LastTerm = last.Index, last.Term })
	}
	return nil
}

func (l promisedLog) DeleteRange(min, max uint64) error {
	last, err := l.LogStore.LastIndex()
	if err != nil {
		return err
	}
	if max < last || min > last {
		return l.LogStore.DeleteRange(min, max) // a prefix after a snapshot: the end stays
	}
	first, err := l.LogStore.FirstIndex()
	if err != nil {
		return err
	}
	var end, term uint64
	if min > first {
		end = min - 1
		var e raft.Log
		if err := l.LogStore.GetLog(end, &e); err != nil {
			return err
		}
		term = e.Term
	}
	l.k.wmu.Lock()
	defer l.k.wmu.Unlock()
	l.k.set(func(p *promise) {
		// After a snapshot install the whole log goes: the snapshot is the new end.
		if end < p.SnapshotIndex {
			end, term = p.SnapshotIndex, p.SnapshotTerm
		}
		p.LastIndex, p.LastTerm = end, term
	})
	if err := l.k.flushLocked(); err != nil {
		l.disk.stop.check("lower the promise before clearing the log's tail", err)
		return err
	}
	err = l.LogStore.DeleteRange(min, max)
	l.disk.stop.check("clear the raft log's tail", err)
	return err
}

// promisedSnapshots is the snapshot store as raft sees it: a snapshot that was written
// completely (its sink closed without error) is promised at once. A failed promise write
// is logged, not returned: the snapshot is whole, and a promise that lags only weakens the
// next start's check.
//
// A Create that fails (a full disk while raft's store writes the snapshot's metadata) leaves
// a directory raft never removes; it is removed here. (A sink that fails later removes its
// own.) Creates are serialised, so that the directories of sinks already open are known.
type promisedSnapshots struct {
	raft.SnapshotStore
	k    *keeper
	log  hclog.Logger
	disk *diskFull
	dir  string // the data directory
	mu   *sync.Mutex
}

func (s promisedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, conf raft.Configuration,
	confIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	s.mu.Lock()
	open := snapshotsInProgress(s.dir)
	sink, err := s.SnapshotStore.Create(version, index, term, conf, confIndex, trans)
	if err != nil {
		removeUnfinishedSnapshots(s.dir, open, s.log)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, s.disk.failed("create a snapshot", err)
	}
	return &promisedSink{SnapshotSink: sink, k: s.k, log: s.log, disk: s.disk, dir: s.dir, index: index, term: term}, nil
}

// promisedSink's Close also fsyncs the snapshot's own directory. raft's file store fsyncs
// state.bin and meta.json, renames their directory into place and fsyncs the parent, but
// never the directory that holds the two names: POSIX makes a new name durable only with an
// fsync of its directory (ext4 and XFS commit it with the file's fsync; not every filesystem
// does). Without it a power cut could leave the snapshot's directory empty after raft had
// compacted the log behind it, and the node could not start (seen on the fault filesystem
// with faultfs.StrictNames). raft compacts only after Close returns, so the sync here comes
// first.
type promisedSink struct {
	raft.SnapshotSink
	k           *keeper
	log         hclog.Logger
	disk        *diskFull
	dir         string // the data directory
	index, term uint64
}

func (s *promisedSink) Close() error {
	if err := s.SnapshotSink.Close(); err != nil {
		return s.disk.failed("write a snapshot", err)
	}
	if err := syncDir(filepath.Join(s.dir, "snapshots", s.ID())); err != nil {
		return s.disk.failed("fsync the snapshot's directory", err)
	}
	s.disk.wrote()
	err := s.k.change(func(p *promise) {
		if s.index > p.SnapshotIndex {
			p.SnapshotIndex, p.SnapshotTerm = s.index, s.term
		}
	})
	if err != nil {
		s.disk.stop.check("write the new snapshot to "+promiseFile, err)
		s.log.Error("cannot write the new snapshot to the promise", "snapshot_index", s.index, "error", err)
	}
	return nil
}

var _ io.Closer = (*promisedSink)(nil)
