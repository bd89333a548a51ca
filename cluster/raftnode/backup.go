package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/hashicorp/raft"

	"github.com/latchd/latch/fsm"
)

// Backup writes a consistent snapshot of the replicated state (held locks and the token
// counter) to w, in the FSM's snapshot format; on the established leader only (errors wrap
// NotLeader elsewhere). A Barrier first makes sure this node still leads and has applied
// everything committed, so the backup holds every grant a client has been answered. Nothing
// is written to w unless every check passed.
func (n *Node) Backup(ctx context.Context, w io.Writer) (fsm.SnapshotInfo, error) {
	if n.closing.Load() {
		return fsm.SnapshotInfo{}, ErrShutdown
	}
	if !n.IsLeader() {
		return fsm.SnapshotInfo{}, n.notLeaderErr()
	}
	if err := n.wait(n.raft.Barrier(n.cfg.ApplyTimeout), ctx.Done(), n.cfg.ApplyTimeout); err != nil {
		if err == errStopped {
			err = ctx.Err()
		}
		return fsm.SnapshotInfo{}, fmt.Errorf("raftnode: backup: barrier: %w", classify(err, 0))
	}
	return n.fsm.Backup(w)
}

// Restored describes the outcome of a Restore.
type Restored struct {
	Snapshot fsm.SnapshotInfo `json:"snapshot"` // the backup as given
	Floor    uint64           `json:"floor"`    // the floor applied: max(requested, Config.TokenFloor, previous last token)
	Previous uint64           `json:"previous"` // the cluster's last token just before the restore
	State    fsm.SnapshotInfo `json:"state"`    // the state now replicated (Index: raft's index of the restore)
}

// Restore replaces the whole replicated state with the backup in data (the FSM's snapshot
// format, as Backup writes it) on every member; on the established leader only.
//
// The token counter afterwards is the largest of: the backup's, floor, Config.TokenFloor and
// the counter this cluster had reached just before the restore. So a restore never makes the
// cluster issue a token it (or, with a well chosen floor, the cluster the backup came from)
// issued before. The floor is written into the restored state itself, not proposed after
// it, so no grant can come between the two.
//
// While it runs this node stops deciding (OnFollower: its waiters are answered, the
// commands in flight are answered with their outcome), then raft installs the backup
// locally, replicates it to the followers (InstallSnapshot) and commits one entry after it.
// If the same leadership still holds, OnLeader is called again: the lock view is rebuilt
// from the restored table and every lease restarts in full. A malformed backup is refused
// before anything changes.
func (n *Node) Restore(ctx context.Context, data []byte, floor uint64) (Restored, error) {
	var out Restored
	backup, err := fsm.ReadBackup(data) // read and verified once, written again with the floor below
	if err != nil {
		return out, fmt.Errorf("raftnode: restore: %w", err)
	}
	info := backup.Info
	out.Snapshot = info
	if floor > uint64(fsm.MaxToken) {
		return out, fmt.Errorf("raftnode: restore: %w", fsm.ErrFloorRange)
	}
	n.restoreMu.Lock()
	defer n.restoreMu.Unlock()
	if n.closing.Load() {
		return out, ErrShutdown
	}

	// Step aside: no new command is packed (the proposer checks leading) and the node above
	// stops deciding.
	n.cbMu.Lock()
	defer n.cbMu.Unlock()
	n.leadMu.Lock()
	if !n.leading.Load() {
		n.leadMu.Unlock()
		return out, n.notLeaderErr()
	}
	stop := n.leadStop
	n.leading.Store(false)
	n.leadMu.Unlock()
	n.log.Info("restore: stepping aside while the backup is installed", "backup_index", info.Index,
		"backup_last_token", uint64(info.LastToken), "backup_keys", info.Keys)
	if n.cfg.OnFollower != nil {
		n.cfg.OnFollower()
	}
	defer func() {
		n.leadMu.Lock()
		back := !stopped(stop) && !n.closing.Load()
		if back {
			n.leading.Store(true)
		}
		n.leadMu.Unlock()
		if back && n.cfg.OnLeader != nil {
			n.cfg.OnLeader(n.fsm)
		}
		n.log.Info("restore: done", "leading", back, "error", err)
	}()

	// Everything already proposed is applied (or failed) before the counter is read: an entry
	// the proposer packed before it saw leading cleared is in raft once applyMu is free, so
	// the Barrier comes after it.
	n.applyMu.Lock()
	//lint:ignore SA2001 the empty critical section waits for the proposer to hand its entry to raft
	n.applyMu.Unlock()
	if err = n.wait(n.raft.Barrier(n.cfg.ApplyTimeout), ctx.Done(), n.cfg.ApplyTimeout); err != nil {
		if err == errStopped {
			err = ctx.Err()
		}
		err = fmt.Errorf("raftnode: restore: barrier: %w", classify(err, 0))
		return out, err
	}
	out.Previous = uint64(n.fsm.LastToken())
	out.Floor = max(floor, n.cfg.TokenFloor, out.Previous)
	prepared, state, err := backup.WithFloor(fsm.Token(out.Floor), 0)
	if err != nil {
		err = fmt.Errorf("raftnode: restore: %w", err)
		return out, err
	}

	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(len(prepared))}
	done := make(chan error, 1)
	if testHookBeforeRaftRestore != nil {
		testHookBeforeRaftRestore()
	}
	go func() { done <- n.raft.Restore(meta, bytes.NewReader(prepared), n.cfg.ApplyTimeout) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// raft goes on installing it: this node stays aside (not leading, the view not
		// rebuilt) until raft is done, whatever the outcome, so that no grant and no lock
		// view from the old state can mix with the restored one.
		n.log.Warn("restore: the caller gave up; waiting for raft to finish installing the backup before leading again", "error", ctx.Err())
		<-done
		err = fmt.Errorf("raftnode: restore: %w", indeterminate(ctx.Err()))
		return out, err
	}
	if err != nil {
		// raft may have installed the backup before the error (the entry after it failed):
		// the outcome is unknown here; latch status tells.
		err = fmt.Errorf("raftnode: restore: %w", indeterminate(err))
		return out, err
	}
	state.Index = n.raft.AppliedIndex()
	out.State = state
	n.log.Info("restore: backup installed and replicated", "index", state.Index, "last_token", uint64(state.LastToken),
		"keys", state.Keys, "floor", out.Floor, "previous_last_token", out.Previous)
	return out, nil
}
