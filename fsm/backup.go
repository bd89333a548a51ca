package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Backups are snapshots in the snapshot format (see WriteSnapshot) taken
// outside raft's own schedule: `latch snapshot save` writes one, `latch
// snapshot restore` reads one. The format checks
// itself (CRC-32C), so a backup file can be verified on its own.

// SnapshotInfo describes one snapshot.
type SnapshotInfo struct {
	Index     uint64 `json:"index"`      // the raft index the state reflects
	LastToken Token  `json:"last_token"` // the last fencing token issued
	Keys      int    `json:"keys"`       // held keys
	// Features are the cluster-wide feature bits turned on (a number: bit 0
	// is FeatureLeases); 0, and left out of JSON, for a snapshot written
	// before any was, so that such a description reads as it always did.
	Features Features `json:"features,omitempty"`
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
	info := SnapshotInfo{Index: c.index, LastToken: c.last, Keys: len(c.entries), Features: c.features}
	return info, c.write(w)
}

// InspectSnapshot reads and verifies a whole snapshot and describes it.
func InspectSnapshot(r io.Reader) (SnapshotInfo, error) {
	t, index, err := ReadSnapshot(r)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return infoOf(t, index), nil
}

// ParsedBackup is a backup read and verified once (ReadBackup), held as a
// table until it is written again with a floor (WithFloor).
type ParsedBackup struct {
	t    *Table
	Info SnapshotInfo // the backup as given
	size int
}

// ReadBackup reads and verifies a whole backup (the snapshot format).
func ReadBackup(data []byte) (*ParsedBackup, error) {
	t, index, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return &ParsedBackup{t: t, Info: infoOf(t, index), size: len(data)}, nil
}

// WithFloor returns the backup rewritten with its counter raised to at least
// floor (never lowered) and its index set to index, with a description of
// the result. The held keys and the features are unchanged. This is how a restore takes
// --token-floor: the floor is part of the restored state itself, so no
// grant can slip in between the restore and a separate floor command. The
// raise stays in b: a later call with a lower floor keeps the higher one.
func (b *ParsedBackup) WithFloor(floor Token, index uint64) ([]byte, SnapshotInfo, error) {
	if _, err := b.t.RaiseFloor(floor); err != nil {
		return nil, SnapshotInfo{}, fmt.Errorf("fsm: token floor %d: %w", floor, err)
	}
	var buf bytes.Buffer
	buf.Grow(b.size)
	if err := WriteSnapshot(&buf, b.t, index); err != nil {
		return nil, SnapshotInfo{}, err
	}
	return buf.Bytes(), infoOf(b.t, index), nil
}

func infoOf(t *Table, index uint64) SnapshotInfo {
	return SnapshotInfo{Index: index, LastToken: t.LastToken(), Keys: t.Len(), Features: t.Features()}
}

// IsBackupError reports whether err says a backup is not a usable latch
// snapshot (format, version or corruption): the caller's input is at fault.
func IsBackupError(err error) bool {
	return errors.Is(err, ErrSnapshotFormat) || errors.Is(err, ErrSnapshotVersion) || errors.Is(err, ErrSnapshotCorrupt)
}
