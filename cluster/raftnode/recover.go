package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/latchd/latch/fsm"
)

// Lost-quorum recovery, offline (the node's process must be stopped): the operator inspects
// each surviving data directory, picks the most up-to-date one, and turns it into a
// one-voter cluster of itself with Recover. The other survivors are wiped and join it.
// Entries the lost majority committed may be missing from every survivor, tokens among
// them, which is why Recover takes a token floor, as a restore does.

// DiskState describes what a data directory holds, as Inspect reads it.
type DiskState struct {
	LastIndex uint64           `json:"last_index"` // the last log entry (or snapshot) index
	LastTerm  uint64           `json:"last_term"`  // its term
	Servers   []Server         `json:"servers"`    // the latest configuration in the log or snapshot
	State     fsm.SnapshotInfo `json:"state"`      // the lock table after replaying everything on disk
	// Damage: why a node would refuse to start from this directory although it can be read
	// (state older than the node promised its peers: promise.go). Recover accepts it.
	Damage []string `json:"damage,omitempty"`
}

// Inspect reads dataDir without changing it: the latest snapshot restored into a fresh
// FSM, then every log entry after it replayed, committed or not (as Recover will keep them).
func Inspect(dataDir string, log hclog.Logger) (DiskState, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	st, err := openStores(dataDir, log, true)
	if err != nil {
		return DiskState{}, err
	}
	defer st.close()
	if has, err := st.hasState(); err != nil || !has {
		if err == nil {
			err = fmt.Errorf("raftnode: %s holds no raft state: check --data-dir", dataDir)
		}
		return DiskState{}, err
	}
	start, err := st.check(log, true)
	if err != nil {
		return DiskState{}, err
	}
	f, err := fsm.NewFSM(0)
	if err != nil {
		return DiskState{}, err
	}
	ds, err := replay(st, f)
	ds.Damage = start.damage
	return ds, err
}

// replay restores the newest readable snapshot into f and applies every log entry after it.
func replay(st *stores, f *fsm.FSM) (DiskState, error) {
	var ds DiskState
	var conf raft.Configuration
	p, err := pickSnapshot(st)
	if err != nil {
		return ds, err
	}
	if p.meta != nil {
		err := f.Restore(p.rc)
		_ = p.rc.Close()
		if err != nil {
			return ds, broken(st.dir, "restore snapshot "+p.meta.ID, err)
		}
		ds.LastIndex, ds.LastTerm, conf = p.meta.Index, p.meta.Term, p.meta.Configuration
	}
	last, err := st.wal.LastIndex()
	if err != nil {
		return ds, fmt.Errorf("raftnode: read the raft log: %w", err)
	}
	for i := ds.LastIndex + 1; i <= last; i++ {
		var e raft.Log
		if err := st.wal.GetLog(i, &e); err != nil {
			return ds, fmt.Errorf("raftnode: read log entry %d: %w", i, err)
		}
		switch e.Type {
		case raft.LogCommand:
			f.Apply(&e)
		case raft.LogConfiguration:
			if conf, err = decodeConfiguration(e.Data); err != nil { // raft's decoder panics
				return ds, broken(st.dir, fmt.Sprintf("decode the configuration in log entry %d", e.Index), err)
			}
		}
		ds.LastIndex, ds.LastTerm = e.Index, e.Term
	}
	for _, s := range conf.Servers {
		ds.Servers = append(ds.Servers, Server{ID: string(s.ID), Addr: string(s.Address), Suffrage: suffrage(s.Suffrage)})
	}
	ds.State = fsm.SnapshotInfo{Index: f.AppliedIndex(), LastToken: f.LastToken(), Keys: f.Len()}
	return ds, nil
}

// RecoverOptions say what Recover makes of a data directory.
type RecoverOptions struct {
	DataDir string
	ID      string // this node's id (--id), the one voter of the recovered cluster
	Addr    string // the address the other nodes will dial (--advertise)
	// TokenFloor: the recovered counter is at least this. Choose it above every token the
	// lost cluster may have issued (see deploy/README.md).
	TokenFloor uint64
	Logger     hclog.Logger
}

// Recover rewrites the raft state in opts.DataDir as a one-voter cluster of opts.ID at
// opts.Addr, keeping the lock table (every entry on disk is kept, committed or not, as
// raft's manual recovery does) with its counter raised to opts.TokenFloor. It returns the
// state before and after. The node's process must not be running (ErrDataDirInUse). Start
// the node afterwards with its usual flags: it elects itself; wipe the other survivors and
// let them join it.
func Recover(opts RecoverOptions) (before, after DiskState, err error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if opts.ID == "" || opts.Addr == "" {
		return before, after, errors.New("raftnode: recover needs the node's id and the address peers dial")
	}
	if opts.TokenFloor > uint64(fsm.MaxToken) {
		return before, after, fmt.Errorf("raftnode: recover: %w", fsm.ErrFloorRange)
	}
	if before, err = Inspect(opts.DataDir, log); err != nil {
		return before, after, err
	}
	st, err := openStores(opts.DataDir, log, true)
	if err != nil {
		return before, after, err
	}
	f, err := fsm.NewFSM(0)
	if err != nil {
		st.close()
		return before, after, err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(opts.ID)
	rc.Logger = log.Named("raft")
	_, trans := raft.NewInmemTransport(raft.ServerAddress(opts.Addr))
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(opts.ID), Address: raft.ServerAddress(opts.Addr)}}}
	err = raft.RecoverCluster(rc, flooredFSM{FSM: f, floor: fsm.Token(opts.TokenFloor)}, st.wal, st.bolt, st.snaps, trans, conf)
	if cerr := st.close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = repromise(opts.DataDir, before, log)
	}
	if err != nil {
		return before, after, fmt.Errorf("raftnode: recover: %w", err)
	}
	after, err = Inspect(opts.DataDir, log)
	return before, after, err
}

// repromise makes the recovered directory's promise what it now holds: the recovered state
// is, by the operator's choice, all this node answers for. A term that raft.db lost is set
// above every term the node may have voted in (the old promise's and the log's).
func repromise(dir string, before DiskState, log hclog.Logger) (err error) {
	st, err := openStores(dir, log, true)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := st.close(); err == nil {
			err = cerr
		}
	}()
	old, _, _ := readPromise(dir)
	term, err := stableUint64(st.bolt, keyCurrentTerm)
	if err != nil {
		return err
	}
	if floor := max(old.Term, old.VoteTerm, before.LastTerm); term < floor {
		if err := st.bolt.SetUint64(keyCurrentTerm, floor+1); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, promiseFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	start, err := st.check(log, false)
	if err != nil {
		return err
	}
	return writePromise(dir, start.cur)
}

// flooredFSM raises the counter to floor just before raft's recovery snapshots the state,
// so the floor is part of the one snapshot the recovered cluster starts from.
type flooredFSM struct {
	*fsm.FSM
	floor fsm.Token
}

func (f flooredFSM) Snapshot() (raft.FSMSnapshot, error) {
	data, err := fsm.AppendBatch(nil, []fsm.Command{{Kind: fsm.CmdFloor, Token: f.floor}})
	if err != nil {
		return nil, err
	}
	res := f.FSM.Apply(&raft.Log{Type: raft.LogCommand, Index: f.FSM.AppliedIndex(), Data: data})
	if r, ok := res.([]fsm.Result); !ok || len(r) != 1 || r[0].Kind != fsm.Floored {
		return nil, fmt.Errorf("raftnode: recover: token floor not applied: %v", res)
	}
	return f.FSM.Snapshot()
}
