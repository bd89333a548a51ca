package fsm

import (
	"bytes"
	"errors"
	"testing"
)

// Backup writes what raft's own snapshot would, described; InspectSnapshot reads it back.
func TestBackupMatchesSnapshot(t *testing.T) {
	f := newFSM(t, 40)
	f.Apply(entry(t, 7, acq("a", 10), acq("b", 20), acq("c", 30)))
	var buf bytes.Buffer
	info, err := f.Backup(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if info != (SnapshotInfo{Index: 7, LastToken: 43, Keys: 3}) {
		t.Fatalf("info %+v", info)
	}
	if !bytes.Equal(buf.Bytes(), persist(t, f)) {
		t.Fatal("a backup differs from raft's snapshot of the same state")
	}
	got, err := InspectSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil || got != info {
		t.Fatalf("InspectSnapshot = %+v, %v; want %+v", got, err, info)
	}
	bad := bytes.Clone(buf.Bytes())
	bad[len(bad)-5] ^= 1
	if _, err := InspectSnapshot(bytes.NewReader(bad)); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("corrupt backup: %v", err)
	}
}

// WithFloor raises and never lowers the counter, keeps the holders, sets the index;
// ReadBackup refuses corrupt data and WithFloor floors out of range.
func TestBackupWithFloor(t *testing.T) {
	f := newFSM(t, 0)
	f.Apply(entry(t, 9, acq("a", 10), acq("b", 20)))
	var buf bytes.Buffer
	if _, err := f.Backup(&buf); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		floor Token
		want  Token
	}{{0, 2}, {1, 2}, {2, 2}, {3, 3}, {1000, 1000}, {MaxToken, MaxToken}} {
		b, err := ReadBackup(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if b.Info != (SnapshotInfo{Index: 9, LastToken: 2, Keys: 2}) {
			t.Fatalf("backup info %+v", b.Info)
		}
		out, info, err := b.WithFloor(c.floor, 77)
		if err != nil {
			t.Fatal(err)
		}
		if info != (SnapshotInfo{Index: 77, LastToken: c.want, Keys: 2}) {
			t.Fatalf("floor %d: info %+v", c.floor, info)
		}
		g := newFSM(t, 0)
		if err := restore(t, g, out); err != nil {
			t.Fatal(err)
		}
		if g.LastToken() != c.want || g.AppliedIndex() != 77 {
			t.Fatalf("floor %d: restored last %d index %d", c.floor, g.LastToken(), g.AppliedIndex())
		}
		if h, ok := g.Holder([]byte("b")); !ok || h != (Holder{Token: 2, Lease: 20}) {
			t.Fatalf("floor %d: holder of b %+v %v", c.floor, h, ok)
		}
	}
	b, err := ReadBackup(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.WithFloor(MaxToken+1, 0); !errors.Is(err, ErrFloorRange) {
		t.Fatalf("floor above MaxToken: %v", err)
	}
	if _, _, err := b.WithFloor(1, 0); err != nil {
		t.Fatalf("a failed raise must leave the backup usable: %v", err)
	}
	if _, err := ReadBackup(buf.Bytes()[:len(buf.Bytes())-1]); !errors.Is(err, ErrSnapshotCorrupt) || !IsBackupError(err) {
		t.Fatalf("truncated backup: %v", err)
	}
	if _, err := ReadBackup([]byte("not a backup at all")); !IsBackupError(err) {
		t.Fatalf("not a backup: %v", err)
	}
	if IsBackupError(ErrFloorRange) {
		t.Fatal("IsBackupError(ErrFloorRange) = true")
	}
}
