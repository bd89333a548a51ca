package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
//
// Open and Recover use them; both hold raft.db's lock while they run.
type stores struct {
	dir   string
	bolt  *raftboltdb.BoltStore
	wal   *wal.WAL
	meta  *metadb.BoltMetaDB // the WAL's metadata: its own Close leaves it open, so we close it
	snaps *raft.FileSnapshotStore
}

// openStores opens (or creates) the stores in dir. On error it closes what it opened.
func openStores(dir string, base hclog.Logger) (*stores, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftnode: create data directory: %w", err)
	}
	st := &stores{dir: dir}
	path := filepath.Join(dir, "raft.db")
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
	if st.snaps, err = raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, base.Named("snapshots")); err != nil {
		_ = st.close()
		return nil, broken(dir, "open the snapshot store in "+dir, err)
	}
	return st, nil
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
// whether Open would restart from it rather than bootstrap or wait to be added. It opens the
// stores briefly, so no node may have dataDir open (ErrDataDirInUse after a wait).
func HasState(dataDir string) (bool, error) {
	st, err := openStores(dataDir, hclog.NewNullLogger())
	if err != nil {
		return false, err
	}
	has, err := st.hasState()
	if cerr := st.close(); err == nil {
		err = cerr
	}
	return has, err
}
