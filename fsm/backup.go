package fsm

import (
	"bytes"
	"fmt"
	"io"
)

// Backups are snapshots in the snapshot format (see WriteSnapshot) taken
// outside raft's own schedule: `latch snapshot save` writes one, `latch
// snapshot restore` and `latch recover` read one. The format checks
// itself (CRC-32C), so a backup file can be verified on its own.

// SnapshotInfo describes one snapshot.
type SnapshotInfo struct {
	Index     uint64 `json:"index"`      // the raft index the state reflects
	LastToken Token  `json:"last_token"` // the last fencing token issued
	Keys      int    `json:"keys"`       // held keys
}

// Backup writes the current state to w in the snapshot format. It copies
// the table under the read lock (32 bytes per held key) and writes the
// copy without it, so applies go on while w is slow. A halted FSM (see
// Err) returns its error: its state is behind the log.
func (f *FSM) Backup(w io.Writer) (SnapshotInfo, error) {
	f.mu.RLock()
	if f.halted != nil {
		f.mu.RUnlock()
		return SnapshotInfo{}, f.halted
	}
	c := f.table.copyState(f.applied.Load())
	f.mu.RUnlock()
	info := SnapshotInfo{Index: c.index, LastToken: c.last, Keys: len(c.entries)}
	return info, c.write(w)
}

// InspectSnapshot reads and verifies a whole snapshot and describes it.
func InspectSnapshot(r io.Reader) (SnapshotInfo, error) {
	t, index, err := ReadSnapshot(r)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return SnapshotInfo{Index: index, LastToken: t.LastToken(), Keys: t.Len()}, nil
}

// RaiseSnapshotFloor verifies the snapshot data and returns it rewritten
// with its counter raised to at least floor (never lowered) and its index
// set to index, with a description of the result. The held keys are
// unchanged. This is how a restore takes --token-floor: the floor is part
// of the restored state itself, so no grant can slip in between the
// restore and a separate floor command.
func RaiseSnapshotFloor(data []byte, floor Token, index uint64) ([]byte, SnapshotInfo, error) {
	t, _, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	if _, err := t.RaiseFloor(floor); err != nil {
		return nil, SnapshotInfo{}, fmt.Errorf("fsm: token floor %d: %w", floor, err)
	}
	var buf bytes.Buffer
	buf.Grow(len(data))
	if err := WriteSnapshot(&buf, t, index); err != nil {
		return nil, SnapshotInfo{}, err
	}
	return buf.Bytes(), SnapshotInfo{Index: index, LastToken: t.LastToken(), Keys: t.Len()}, nil
}
