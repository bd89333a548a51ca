package fsm

import (
	"bytes"
	"errors"
	"strings"
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

// A backup carries the features: Backup, InspectSnapshot, ReadBackup and
// WithFloor describe and keep them, and a restore of it turns them on.
func TestBackupCarriesFeatures(t *testing.T) {
	f := newFSM(t, 0)
	if err := restore(t, f, writeSnap(t, enabled(t, smallTable(t), FeatureLeases), 12)); err != nil {
		t.Fatal(err)
	}
	if f.Features() != FeatureLeases {
		t.Fatalf("restored features %v", f.Features())
	}
	var buf bytes.Buffer
	info, err := f.Backup(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := SnapshotInfo{Index: 12, LastToken: 901, Keys: 5, Features: FeatureLeases}
	if info != want || buf.Bytes()[8] != snapshotV3 || !bytes.Equal(buf.Bytes(), persist(t, f)) {
		t.Fatalf("backup %+v, version %d; want %+v, version 3, raft's snapshot bytes", info, buf.Bytes()[8], want)
	}
	if got, err := InspectSnapshot(bytes.NewReader(buf.Bytes())); err != nil || got != want {
		t.Fatalf("InspectSnapshot = %+v, %v", got, err)
	}
	b, err := ReadBackup(buf.Bytes())
	if err != nil || b.Info != want {
		t.Fatalf("ReadBackup: %+v, %v", b, err)
	}
	out, outInfo, err := b.WithFloor(5000, 70)
	if err != nil || outInfo != (SnapshotInfo{Index: 70, LastToken: 5000, Keys: 5, Features: FeatureLeases}) || out[8] != snapshotV3 {
		t.Fatalf("WithFloor: %+v, version %d, %v", outInfo, out[8], err)
	}
	g := newFSM(t, 0)
	if err := restore(t, g, out); err != nil || g.Features() != FeatureLeases || g.LastToken() != 5000 {
		t.Fatalf("restore of the floored backup: features %v, last %d, %v", g.Features(), g.LastToken(), err)
	}
}

// goldenSnapshot returns the snapshot a golden log file ends with.
func goldenSnapshot(t *testing.T, name string) []byte {
	t.Helper()
	lines := goldenLines(t, name)
	last, ok := strings.CutPrefix(lines[len(lines)-1], "snapshot ")
	if !ok {
		t.Fatalf("%s does not end with a snapshot", name)
	}
	return goldenHex(t, last)
}

// A snapshot or backup written before features existed (version 1 by commit
// 28a4f08, version 2 by commit 04b0080) restores with features 0, even over
// a state that had them (a restore replaces), and WithFloor writes it back
// in its own version, byte for byte.
func TestOlderBackupsRestoreWithoutFeatures(t *testing.T) {
	for _, name := range []string{"log_v1.txt", "log_v2.txt"} {
		t.Run(name, func(t *testing.T) {
			old := goldenSnapshot(t, name)
			f := newFSM(t, 0)
			if err := restore(t, f, writeSnap(t, enabled(t, newTable(t, 0), FeatureLeases), 3)); err != nil || f.Features() != FeatureLeases {
				t.Fatalf("setup: features %v, %v", f.Features(), err)
			}
			if err := restore(t, f, old); err != nil {
				t.Fatal(err)
			}
			if f.Features() != 0 {
				t.Fatalf("restored the version %d snapshot with features %v", old[8], f.Features())
			}
			b, err := ReadBackup(old)
			if err != nil || b.Info.Features != 0 {
				t.Fatalf("ReadBackup: %+v, %v", b, err)
			}
			again, info, err := b.WithFloor(0, b.Info.Index)
			if err != nil || info != b.Info || !bytes.Equal(again, old) {
				t.Fatalf("WithFloor(0) = version %d, %+v, %v; want the backup as it was", again[8], info, err)
			}
			if got := persist(t, f); !bytes.Equal(got, old) {
				t.Fatalf("the restored state writes version %d, not the version %d snapshot it came from", got[8], old[8])
			}
		})
	}
}
