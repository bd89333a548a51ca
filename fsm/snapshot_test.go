package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
	failAfter         int // if > 0, writes fail once the buffer would exceed it
}

var errSinkFull = errors.New("sink full")

func (s *memSink) Write(p []byte) (int, error) {
	if s.failAfter > 0 && s.Len()+len(p) > s.failAfter {
		return 0, errSinkFull
	}
	return s.Buffer.Write(p)
}
func (s *memSink) ID() string     { return "mem" }
func (s *memSink) Close() error   { s.closed = true; return nil }
func (s *memSink) Cancel() error  { s.cancelled = true; return nil }
func (s *memSink) String() string { return fmt.Sprintf("memSink(%d bytes)", s.Len()) }

// smallTable is a table with a few holders, released keys and a floor.
func smallTable(t *testing.T) *Table {
	t.Helper()
	tb := newTable(t, 500)
	for _, c := range []Command{
		acq("b", 10), acq("a", 20), acq("c", 3600), acq(string(key128), 1),
		rel("b", 501), acq("\xff\x00", 7), flr(900), acq("z", 5),
	} {
		if r := tb.ApplyCommand(c); r.Kind != Granted && r.Kind != Released && r.Kind != Floored {
			t.Fatalf("setup %v: %v", c.Kind, r.Kind)
		}
	}
	return tb
}

// extendHolder gives key's holder a lease and an extension count, as that
// many extends would.
func extendHolder(t testing.TB, tb *Table, key string, lease uint16, n uint32) {
	t.Helper()
	h, ok := tb.held[key]
	if !ok {
		t.Fatalf("%q is not held", key)
	}
	h.Lease, h.Extensions = lease, n
	tb.held[key] = h
}

// extendedTable is smallTable with two holders extended, one of them
// MaxExtensions times.
func extendedTable(t *testing.T) *Table {
	t.Helper()
	tb := smallTable(t)
	extendHolder(t, tb, "a", 45, 2)
	extendHolder(t, tb, "z", 5, MaxExtensions)
	return tb
}

// enabled turns features on in tb through ApplyCommand, as a committed
// Enable would.
func enabled(t testing.TB, tb *Table, f Features) *Table {
	t.Helper()
	if r := tb.ApplyCommand(enable(f)); r.Kind != Enabled {
		t.Fatalf("enable %v: %+v", f, r)
	}
	return tb
}

func writeSnap(t testing.TB, tb *Table, index uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, tb, index); err != nil {
		t.Fatalf("WriteSnapshot: %v", err)
	}
	return buf.Bytes()
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table func(t *testing.T) *Table
		index uint64
	}{
		{"empty, floor 0", func(t *testing.T) *Table { return newTable(t, 0) }, 0},
		{"empty, floor MaxToken", func(t *testing.T) *Table { return newTable(t, MaxToken) }, 1},
		{"small", smallTable, 12345},
		{"max index", smallTable, 1<<64 - 1},
		{"MaxToken holder", func(t *testing.T) *Table {
			tb := newTable(t, MaxToken-1)
			tb.ApplyCommand(acq(string(key128), MaxLease))
			return tb
		}, 7},
		{"extended holders (version 2)", extendedTable, 99},
		{"one holder, extended", func(t *testing.T) *Table {
			tb := newTable(t, 0)
			tb.ApplyCommand(acq("k", 1))
			extendHolder(t, tb, "k", 2, 1)
			return tb
		}, 3},
		{"features, none extended (version 3)", func(t *testing.T) *Table { return enabled(t, smallTable(t), FeatureLeases) }, 4},
		{"features and extended holders (version 3)", func(t *testing.T) *Table { return enabled(t, extendedTable(t), FeatureLeases) }, 5},
		{"features, empty (version 3)", func(t *testing.T) *Table { return enabled(t, newTable(t, 0), FeatureLeases) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.table(t)
			data := writeSnap(t, src, tc.index)
			got, index, err := ReadSnapshot(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("ReadSnapshot: %v", err)
			}
			if index != tc.index || got.LastToken() != src.LastToken() || !equalState(snapshot(got), snapshot(src)) ||
				got.Features() != src.Features() {
				t.Fatalf("read index %d last %d features %v %v; wrote %d %d %v %v", index, got.LastToken(), got.Features(),
					snapshot(got), tc.index, src.LastToken(), src.Features(), snapshot(src))
			}
			if again := writeSnap(t, got, index); !bytes.Equal(again, data) {
				t.Fatal("a read snapshot does not write back to the same bytes")
			}
			// One byte at a time, as a slow pipe delivers it.
			if _, _, err := ReadSnapshot(iotest.OneByteReader(bytes.NewReader(data))); err != nil {
				t.Fatalf("ReadSnapshot one byte at a time: %v", err)
			}
		})
	}
}

// TestSnapshotLayout pins the format: magic, version, index, last, count,
// sorted entries, CRC-32C.
func TestSnapshotLayout(t *testing.T) {
	tb := newTable(t, 0)
	tb.ApplyCommand(acq("b", 2)) // token 1
	tb.ApplyCommand(acq("a", 1)) // token 2
	data := writeSnap(t, tb, 9)
	want := []byte("LATCHSNP\x01")
	want = binary.BigEndian.AppendUint64(want, 9)
	want = binary.BigEndian.AppendUint64(want, 2)
	want = binary.BigEndian.AppendUint64(want, 2)
	want = append(want, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 2, 0, 1)
	want = append(want, 1, 'b', 0, 0, 0, 0, 0, 0, 0, 1, 0, 2)
	want = binary.BigEndian.AppendUint32(want, crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)))
	if !bytes.Equal(data, want) {
		t.Fatalf("layout\n got %x\nwant %x", data, want)
	}
}

// TestSnapshotV2Layout pins version 2: as version 1, with each entry's
// extension count after its lease.
func TestSnapshotV2Layout(t *testing.T) {
	tb := newTable(t, 0)
	tb.ApplyCommand(acq("b", 2)) // token 1
	tb.ApplyCommand(acq("a", 1)) // token 2
	extendHolder(t, tb, "b", 300, 1)
	data := writeSnap(t, tb, 9)
	want := []byte("LATCHSNP\x02")
	want = binary.BigEndian.AppendUint64(want, 9)
	want = binary.BigEndian.AppendUint64(want, 2)
	want = binary.BigEndian.AppendUint64(want, 2)
	want = append(want, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0)
	want = append(want, 1, 'b', 0, 0, 0, 0, 0, 0, 0, 1, 0x01, 0x2c, 0, 0, 0, 1)
	want = binary.BigEndian.AppendUint32(want, crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)))
	if !bytes.Equal(data, want) {
		t.Fatalf("layout\n got %x\nwant %x", data, want)
	}
}

// TestSnapshotV3Layout pins version 3: as version 2, with the features
// after the count.
func TestSnapshotV3Layout(t *testing.T) {
	tb := newTable(t, 0)
	tb.ApplyCommand(acq("b", 2)) // token 1
	tb.ApplyCommand(acq("a", 1)) // token 2
	extendHolder(t, tb, "b", 300, 1)
	enabled(t, tb, FeatureLeases)
	data := writeSnap(t, tb, 9)
	want := []byte("LATCHSNP\x03")
	want = binary.BigEndian.AppendUint64(want, 9)
	want = binary.BigEndian.AppendUint64(want, 2)
	want = binary.BigEndian.AppendUint64(want, 2)
	want = append(want, 0, 0, 0, 1) // features: leases
	want = append(want, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0)
	want = append(want, 1, 'b', 0, 0, 0, 0, 0, 0, 0, 1, 0x01, 0x2c, 0, 0, 0, 1)
	want = binary.BigEndian.AppendUint32(want, crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)))
	if !bytes.Equal(data, want) {
		t.Fatalf("layout\n got %x\nwant %x", data, want)
	}
}

// TestSnapshotVersionRule: the oldest version that carries the state.
// Version 1 while no holder is extended and no feature is on, so that a
// node of a latch that reads only version 1 can restore it; version 2 from
// the first extension until the last extended holder is gone, while no
// feature is on; version 3 from the first feature on, for good (features
// are never turned off).
func TestSnapshotVersionRule(t *testing.T) {
	tb := newTable(t, 0)
	steps := []struct {
		what string
		do   func()
		want byte
	}{
		{"two grants", func() { tb.ApplyCommand(acq("a", 10)); tb.ApplyCommand(acq("b", 10)) }, 1},
		{"a extended", func() { extendHolder(t, tb, "a", 20, 1) }, 2},
		{"b released", func() { tb.ApplyCommand(rel("b", 2)) }, 2},
		{"a released", func() { tb.ApplyCommand(rel("a", 1)) }, 1},
		{"a granted again", func() { tb.ApplyCommand(acq("a", 10)) }, 1},
		{"a extended again", func() { extendHolder(t, tb, "a", 20, 1) }, 2},
		{"leases enabled", func() { enabled(t, tb, FeatureLeases) }, 3},
		{"a released again", func() { tb.ApplyCommand(rel("a", 3)) }, 3},
		{"empty, leases on", func() {}, 3},
	}
	for _, s := range steps {
		s.do()
		if got := writeSnap(t, tb, 1)[8]; got != s.want {
			t.Fatalf("after %s: version %d, want %d", s.what, got, s.want)
		}
	}
}

// TestSnapshotBytesDependOnStateOnly: two tables with the same state, built
// in different orders, write identical bytes.
func TestSnapshotBytesDependOnStateOnly(t *testing.T) {
	a, b := newTable(t, 0), newTable(t, 0)
	for i := range 1000 {
		a.ApplyCommand(acq(fmt.Sprintf("k%04d", i), 30))
	}
	b.RaiseFloor(1000)
	for i := 999; i >= 0; i-- {
		if err := b.Restore(fmt.Sprintf("k%04d", i), Holder{Token: Token(i + 1), Lease: 30}); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(writeSnap(t, a, 3), writeSnap(t, b, 3)) {
		t.Fatal("same state, different snapshot bytes")
	}
}

// rawSnapshot builds snapshot bytes by hand, with a correct checksum, so
// that the reader's checks behind the checksum can be exercised.
type rawEntry struct {
	key   string
	tok   Token
	lease uint16
	ext   uint32 // written in version 2 (and any version above 1) only
}

func rawSnapshot(version byte, index uint64, last Token, count uint64, entries []rawEntry) []byte {
	return rawSnapshotF(version, index, last, count, 0, entries)
}

// rawSnapshotF is rawSnapshot with a features field, written in version 3
// (and any version above it) only.
func rawSnapshotF(version byte, index uint64, last Token, count uint64, features Features, entries []rawEntry) []byte {
	b := append([]byte("LATCHSNP"), version)
	b = binary.BigEndian.AppendUint64(b, index)
	b = binary.BigEndian.AppendUint64(b, uint64(last))
	b = binary.BigEndian.AppendUint64(b, count)
	if version >= 3 {
		b = binary.BigEndian.AppendUint32(b, uint32(features))
	}
	for _, e := range entries {
		b = append(b, byte(len(e.key)))
		b = append(b, e.key...)
		b = binary.BigEndian.AppendUint64(b, uint64(e.tok))
		b = binary.BigEndian.AppendUint16(b, e.lease)
		if version != 1 {
			b = binary.BigEndian.AppendUint32(b, e.ext)
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// corruptSnapshots returns damaged variants of a valid snapshot, each with
// the error ReadSnapshot must wrap.
func corruptSnapshots(t *testing.T) map[string]struct {
	data []byte
	want error
} {
	t.Helper()
	out := map[string]struct {
		data []byte
		want error
	}{}
	add := func(name string, data []byte, want error) {
		if _, dup := out[name]; dup {
			t.Fatalf("duplicate case %q", name)
		}
		out[name] = struct {
			data []byte
			want error
		}{data, want}
	}
	good := writeSnap(t, smallTable(t), 77)
	for prefix, good := range map[string][]byte{
		"":          good,
		"v2 ":       writeSnap(t, extendedTable(t), 78),
		"v3 ":       writeSnap(t, enabled(t, extendedTable(t), FeatureLeases), 79),
		"v3 plain ": writeSnap(t, enabled(t, smallTable(t), FeatureLeases), 80),
	} {
		for n := range len(good) {
			add(fmt.Sprintf("%struncated to %d", prefix, n), good[:n], ErrSnapshotCorrupt)
		}
		for i := range len(good) {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				b := bytes.Clone(good)
				b[i] ^= x
				want := ErrSnapshotCorrupt
				switch {
				case i < 8:
					want = ErrSnapshotFormat
				case i == 8 && (b[i] == 0 || b[i] > SnapshotVersion):
					want = ErrSnapshotVersion
				} // another known version: the checksum covers the version byte
				add(fmt.Sprintf("%sbyte %d ^ %#x", prefix, i, x), b, want)
			}
		}
	}
	add("trailing byte", append(bytes.Clone(good), 0), ErrSnapshotCorrupt)
	add("two snapshots", append(bytes.Clone(good), good...), ErrSnapshotCorrupt)
	add("wrong magic", append([]byte("LATCHSNQ"), good[8:]...), ErrSnapshotFormat)
	add("other file", []byte("{\"raft\": true}\n"), ErrSnapshotFormat)
	add("version 0, good checksum", rawSnapshot(0, 1, 5, 0, nil), ErrSnapshotVersion)
	add("version 4, good checksum", rawSnapshot(4, 1, 5, 0, nil), ErrSnapshotVersion)
	add("version 2 without entries", rawSnapshot(2, 1, 5, 0, nil), ErrSnapshotCorrupt)
	add("version 2 without an extended holder", rawSnapshot(2, 1, 5, 2, []rawEntry{{"a", 1, 1, 0}, {"b", 2, 1, 0}}), ErrSnapshotCorrupt)
	add("control: valid raw version 2", rawSnapshot(2, 1, 5, 2, []rawEntry{{"a", 1, 1, 0}, {"b", 2, 1, MaxExtensions}}), nil)
	v1body := rawSnapshot(1, 1, 5, 2, []rawEntry{{"a", 1, 1, 0}, {"b", 2, 1, 0}})
	v1body = v1body[:len(v1body)-4]
	v1body[8] = 2
	add("version 3 without features", rawSnapshotF(3, 1, 5, 1, 0, []rawEntry{{"a", 1, 1, 3}}), ErrSnapshotCorrupt)
	add("version 3 empty, without features", rawSnapshotF(3, 1, 5, 0, 0, nil), ErrSnapshotCorrupt)
	add("control: valid raw version 3", rawSnapshotF(3, 1, 5, 1, FeatureLeases, []rawEntry{{"a", 1, 1, 0}}), nil)
	add("control: valid raw version 3, extended", rawSnapshotF(3, 1, 5, 1, FeatureLeases, []rawEntry{{"a", 1, 1, 9}}), nil)
	add("version 3 with an unknown feature, good checksum", rawSnapshotF(3, 1, 5, 0, 1<<1, nil), ErrSnapshotVersion)
	add("version 3 with a known and an unknown feature", rawSnapshotF(3, 1, 5, 1, FeatureLeases|1<<31, []rawEntry{{"a", 1, 1, 0}}), ErrSnapshotVersion)
	add("version 3 with every feature bit", rawSnapshotF(3, 1, 5, 0, ^Features(0), nil), ErrSnapshotVersion)
	v2body := rawSnapshot(2, 1, 5, 1, []rawEntry{{"a", 1, 1, 3}})
	v2body = v2body[:len(v2body)-4]
	v2body[8] = 3
	add("version 3 with a version 2 header", binary.BigEndian.AppendUint32(v2body, crc32.Checksum(v2body, crc32.MakeTable(crc32.Castagnoli))), ErrSnapshotCorrupt)
	add("version 2 with version 1 entries", binary.BigEndian.AppendUint32(v1body, crc32.Checksum(v1body, crc32.MakeTable(crc32.Castagnoli))), ErrSnapshotCorrupt)

	ok := []rawEntry{{"a", 1, 1, 0}, {"b", 2, 1, 0}}
	add("control: valid raw", rawSnapshot(1, 1, 5, 2, ok), nil)
	add("count above entries", rawSnapshot(1, 1, 5, 3, ok), ErrSnapshotCorrupt)
	add("count below entries", rawSnapshot(1, 1, 5, 1, ok), ErrSnapshotCorrupt)
	add("count above last token", rawSnapshot(1, 1, 1, 2, ok), ErrSnapshotCorrupt)
	add("huge count", rawSnapshot(1, 1, MaxToken, 1<<62, ok), ErrSnapshotCorrupt)
	add("last above MaxToken", rawSnapshot(1, 1, MaxToken+1, 0, nil), ErrSnapshotCorrupt)
	add("unsorted", rawSnapshot(1, 1, 5, 2, []rawEntry{{"b", 2, 1, 0}, {"a", 1, 1, 0}}), ErrSnapshotCorrupt)
	add("repeated key", rawSnapshot(1, 1, 5, 2, []rawEntry{{"a", 1, 1, 0}, {"a", 2, 1, 0}}), ErrSnapshotCorrupt)
	add("empty key", rawSnapshot(1, 1, 5, 1, []rawEntry{{"", 1, 1, 0}}), ErrSnapshotCorrupt)
	add("129-byte key", rawSnapshot(1, 1, 5, 1, []rawEntry{{string(key128) + "x", 1, 1, 0}}), ErrSnapshotCorrupt)
	add("token 0", rawSnapshot(1, 1, 5, 1, []rawEntry{{"a", 0, 1, 0}}), ErrSnapshotCorrupt)
	add("token above last", rawSnapshot(1, 1, 5, 1, []rawEntry{{"a", 6, 1, 0}}), ErrSnapshotCorrupt)
	add("lease 0", rawSnapshot(1, 1, 5, 1, []rawEntry{{"a", 1, 0, 0}}), ErrSnapshotCorrupt)
	add("lease 3601", rawSnapshot(1, 1, 5, 1, []rawEntry{{"a", 1, MaxLease + 1, 0}}), ErrSnapshotCorrupt)
	x := rawEntry{"x", 3, 1, 1} // an extended holder, so that these are version 2 snapshots
	add("v2 unsorted", rawSnapshot(2, 1, 5, 3, []rawEntry{{"b", 2, 1, 0}, {"a", 1, 1, 0}, x}), ErrSnapshotCorrupt)
	add("v2 repeated key", rawSnapshot(2, 1, 5, 2, []rawEntry{x, x}), ErrSnapshotCorrupt)
	add("v2 token above last", rawSnapshot(2, 1, 5, 2, []rawEntry{{"a", 6, 1, 0}, x}), ErrSnapshotCorrupt)
	add("v2 lease 0", rawSnapshot(2, 1, 5, 2, []rawEntry{{"a", 1, 0, 0}, x}), ErrSnapshotCorrupt)
	add("v2 count above entries", rawSnapshot(2, 1, 5, 2, []rawEntry{x}), ErrSnapshotCorrupt)
	return out
}

func TestReadSnapshotRejectsCorruption(t *testing.T) {
	for name, tc := range corruptSnapshots(t) {
		tb, index, err := ReadSnapshot(bytes.NewReader(tc.data))
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
		if tb != nil || index != 0 {
			t.Errorf("%s: returned a table with the error", name)
		}
	}
}

func TestReadSnapshotPassesReaderErrors(t *testing.T) {
	good := writeSnap(t, smallTable(t), 1)
	boom := errors.New("disk on fire")
	for _, n := range []int{0, 5, 40, len(good) - 2, len(good)} {
		r := io.MultiReader(bytes.NewReader(good[:n]), iotest.ErrReader(boom))
		if _, _, err := ReadSnapshot(r); !errors.Is(err, boom) {
			t.Errorf("error after %d bytes: got %v, want the reader's error", n, err)
		}
	}
}

func TestWriteSnapshotRejectsUnwritableEntries(t *testing.T) {
	for _, tc := range []struct {
		name string
		fill func(*Table)
	}{
		{"lease 0", func(tb *Table) { tb.Acquire([]byte("k"), 0) }},
		{"lease 3601", func(tb *Table) { tb.Acquire([]byte("k"), MaxLease+1) }},
		{"129-byte key", func(tb *Table) { tb.Acquire(append(key128, 'x'), 1) }},
		{"empty key", func(tb *Table) { tb.Acquire(nil, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(t, 0)
			tb.ApplyCommand(acq("fine", 1))
			tc.fill(tb)
			var buf bytes.Buffer
			if err := WriteSnapshot(&buf, tb, 1); !errors.Is(err, ErrSnapshotEntry) {
				t.Fatalf("WriteSnapshot err = %v, want ErrSnapshotEntry", err)
			}
		})
	}
}

func TestWriteSnapshotPassesWriterErrors(t *testing.T) {
	tb := newTable(t, 0)
	for i := range 20_000 { // > one 64 KiB buffer
		tb.ApplyCommand(acq(strings.Repeat("k", 20)+fmt.Sprint(i), 1))
	}
	for _, limit := range []int{1, 70_000, 1 << 30} {
		s := &memSink{failAfter: limit}
		err := WriteSnapshot(s, tb, 1)
		if limit == 1<<30 {
			if err != nil {
				t.Fatalf("unlimited sink: %v", err)
			}
			continue
		}
		if !errors.Is(err, errSinkFull) {
			t.Fatalf("sink failing after %d bytes: err = %v", limit, err)
		}
	}
}

// FuzzReadSnapshot: never panic; anything accepted writes back to the same
// bytes.
func FuzzReadSnapshot(f *testing.F) {
	tb, _ := NewTable(10)
	f.Add(rawSnapshot(1, 0, 0, 0, nil))
	for _, c := range []Command{acq("b", 10), acq("a", 20), acq("c", 3600), rel("b", 11), flr(99)} {
		tb.ApplyCommand(c)
		var buf bytes.Buffer
		if err := WriteSnapshot(&buf, tb, 4); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add(rawSnapshot(1, 1, 5, 2, []rawEntry{{"b", 2, 1, 0}, {"a", 1, 1, 0}}))
	for _, step := range []func(){
		func() { extendHolder(f, tb, "a", 30, 1) },
		func() { extendHolder(f, tb, "a", 40, 2) },
		func() { tb.ApplyCommand(rel("a", 12)) },
		func() { tb.ApplyCommand(acq("d", 1)); extendHolder(f, tb, "d", 1, MaxExtensions) },
		func() { enabled(f, tb, FeatureLeases) },
		func() { tb.ApplyCommand(rel("d", 13)) },
	} {
		step()
		var buf bytes.Buffer
		if err := WriteSnapshot(&buf, tb, 5); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add(rawSnapshot(2, 1, 5, 2, []rawEntry{{"a", 1, 1, 0}, {"b", 2, 1, MaxExtensions}}))
	f.Add(rawSnapshot(2, 1, 5, 1, []rawEntry{{"a", 1, 1, 0}}))
	f.Add(rawSnapshotF(3, 1, 5, 1, FeatureLeases, []rawEntry{{"a", 1, 1, 0}}))
	f.Add(rawSnapshotF(3, 1, 5, 0, 0, nil))
	f.Add(rawSnapshotF(3, 1, 5, 0, FeatureLeases|1<<1, nil))
	f.Add([]byte("LATCHSNP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tb, index, err := ReadSnapshot(bytes.NewReader(data))
		if err != nil {
			if tb != nil {
				t.Fatal("table returned with an error")
			}
			if !errors.Is(err, ErrSnapshotCorrupt) && !errors.Is(err, ErrSnapshotFormat) && !errors.Is(err, ErrSnapshotVersion) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := WriteSnapshot(&buf, tb, index); err != nil {
			t.Fatalf("accepted snapshot does not write back: %v", err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("wrote back\n%x\nread\n%x", buf.Bytes(), data)
		}
	})
}
