package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// stores are a node's files under its data directory:
//
//	raft.db     term and vote (raft-boltdb; the StableStore)
//	wal/        the Raft log (raft-wal: one fsync per append, where bolt needs two)
//	snapshots/  raft's file snapshot store (the FSM's snapshot format)
//	format.json the directory's format and the latch that last wrote it (format.go)
//
// Open and Recover use them; both hold raft.db's lock while they run.
type stores struct {
	dir   string
	bolt  *raftboltdb.BoltStore
	wal   *wal.WAL
	meta  *metadb.BoltMetaDB // the WAL's metadata: its own Close leaves it open, so we close it
	snaps *raft.FileSnapshotStore
	scan  walScan // the raft log as scanWAL verified it before raft-wal opened it
	// format is format.json as it was found (checkFormat passed it).
	format dirFormat
	// lagging: check found raft.db's term ahead of the promise, so it did not hold the log
	// to the promise's end.
	lagging bool
}

// openStores opens (or creates) the stores in dir. On error it closes what it opened.
// Unless lenient (latch recover), it refuses before raft-wal opens the log a missing tail
// segment that held promised entries: raft-wal would create it empty. First of all it
// refuses a directory of a newer format (ErrDataDirNewer), before it opens a store.
func openStores(dir string, base hclog.Logger, lenient bool) (*stores, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftnode: create data directory: %w", err)
	}
	format, err := checkFormat(dir)
	if err != nil {
		return nil, err
	}
	st := &stores{dir: dir, format: format}
	path := filepath.Join(dir, "raft.db")
	if err := raftDBPresent(dir, path); err != nil {
		return nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: path,
		BoltOptions: &bbolt.Options{
			Timeout:        boltOpenTimeout,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
		NoSync: false, // never: votes must survive a power loss
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w (%s stayed locked for %v)", ErrDataDirInUse, path, boltOpenTimeout)
	}
	if err != nil {
		return nil, broken(dir, "open "+path, err)
	}
	st.bolt = store

	walDir := filepath.Join(dir, "wal")
	if err := os.MkdirAll(walDir, 0o700); err != nil {
		_ = st.close()
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	// Verify the log before raft-wal opens it: raft-wal deletes segment files that its
	// metadata does not list and recreates a missing tail (walscan.go).
	if st.scan, err = scanWAL(dir); err != nil {
		_ = st.close()
		return nil, err
	}
	if t := st.scan.tail(); t != nil && t.missing && !lenient {
		if p, ok, _ := readPromise(dir); ok && max(p.LastIndex, p.SnapshotIndex) >= t.info.BaseIndex {
			_ = st.close()
			return nil, broken(dir, fmt.Sprintf("log segment %s (from index %d) is missing, but this node acknowledged entries up to %d (%s)",
				t.file, t.info.BaseIndex, max(p.LastIndex, p.SnapshotIndex), promiseFile), errAmnesia)
		}
	}
	st.meta = &metadb.BoltMetaDB{}
	if st.wal, err = wal.Open(walDir, wal.WithMetaStore(st.meta), wal.WithLogger(base.Named("wal"))); err != nil {
		_ = st.close()
		return nil, broken(dir, "open the raft log in "+walDir, err)
	}
	if old, _ := store.LastIndex(); old > 0 {
		if cur, _ := st.wal.LastIndex(); cur == 0 {
			_ = st.close()
			return nil, fmt.Errorf("raftnode: %s holds a Raft log written by an older latch (log in raft.db); "+
				"this version keeps it in %s: take a snapshot backup with the old version, or start this node "+
				"with an empty --data-dir and let it catch up from the cluster", path, walDir)
		}
	}
	removeUnfinishedSnapshots(dir, nil, base.Named("snapshots")) // no snapshot is being written yet
	if st.snaps, err = raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, base.Named("snapshots")); err != nil {
		_ = st.close()
		return nil, broken(dir, "open the snapshot store in "+dir, err)
	}
	return st, nil
}

// raftDBPresent refuses a data directory whose raft.db is gone while a log, a snapshot or a
// promise is still there: opening it would create an empty raft.db, and the node would have
// forgotten its votes.
func raftDBPresent(dir, path string) error {
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var left []string
	if files, _ := segmentFiles(filepath.Join(dir, "wal")); len(files) > 0 {
		left = append(left, fmt.Sprintf("%d log segments in wal/", len(files)))
	}
	if snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots")); len(snaps) > len(snapshotsInProgress(dir)) {
		left = append(left, "snapshots/") // a snapshot cut short (.tmp) is none: removed at the start
	}
	if _, err := os.Stat(filepath.Join(dir, promiseFile)); err == nil {
		left = append(left, promiseFile)
	}
	if len(left) == 0 {
		return nil
	}
	return broken(dir, fmt.Sprintf("%s is missing beside %s", path, strings.Join(left, ", ")), errAmnesia)
}

// close closes the stores (the WAL before its metadata).
func (st *stores) close() error {
	var errs []error
	if st.wal != nil {
		if err := st.wal.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close the raft log: %w", err))
		}
	}
	if st.meta != nil {
		if err := st.meta.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close the raft log's metadata: %w", err))
		}
	}
	if st.bolt != nil {
		if err := st.bolt.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close raft.db: %w", err))
		}
	}
	return errors.Join(errs...)
}

// hasState reports whether the stores hold any raft state (log, votes or a snapshot).
func (st *stores) hasState() (bool, error) {
	return raft.HasExistingState(st.wal, st.bolt, st.snaps)
}

// HasState reports whether dataDir holds raft state (a log, votes or a snapshot), that is,
// whether Open would restart from it rather than bootstrap or wait to be added. It reads
// the stores without opening the log with raft-wal (which would repair what Open must see
// as it is), so no node may have dataDir open (ErrDataDirInUse after a wait).
func HasState(dataDir string) (bool, error) {
	if _, err := os.Stat(dataDir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	path := filepath.Join(dataDir, "raft.db")
	if err := raftDBPresent(dataDir, path); err != nil {
		return false, err
	}
	if fi, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err == nil && fi.Size() > 0 {
		if has, err := termInRaftDB(dataDir, path); has || err != nil {
			return has, err
		}
	}
	scan, err := scanWAL(dataDir)
	if err != nil {
		return false, err
	}
	if scan.last() > 0 {
		return true, nil
	}
	snaps, err := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	for _, e := range snaps {
		if !strings.HasSuffix(e.Name(), ".tmp") { // raft's snapshot in progress
			return true, nil
		}
	}
	return false, nil
}

// termInRaftDB reports whether raft.db holds a term, reading it without a write lock.
func termInRaftDB(dataDir, path string) (bool, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: boltOpenTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return false, fmt.Errorf("%w (%s stayed locked for %v)", ErrDataDirInUse, path, boltOpenTimeout)
	}
	if err != nil {
		return false, broken(dataDir, "open "+path, err)
	}
	defer db.Close()
	var term []byte
	_ = db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket([]byte("conf")); b != nil { // raft-boltdb's bucket for StableStore keys
			term = b.Get(keyCurrentTerm)
		}
		return nil
	})
	return len(term) > 0, nil
}
