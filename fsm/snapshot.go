package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
)

// Snapshot format (all integers unsigned big-endian):
//
//	magic    8 bytes  "LATCHSNP"
//	version  u8       1, 2 or 3
//	index    u64      the raft index the state reflects (0 outside raft)
//	last     u64      the last token issued (the floor before any grant)
//	count    u64      the number of held keys
//	features u32      version 3 only: the feature bits turned on (Features), never 0
//	entries  count times, keys in strictly increasing byte order:
//	           version 1: keylen u8 (1..MaxKeyLen), key, token u64 (1..last), lease u16 (1..MaxLease)
//	           versions 2 and 3: the same, then extensions u32 (the holder's extension count)
//	crc      u32      CRC-32C (Castagnoli) of every byte before it
//
// and nothing after. Sorting makes the bytes a function of the state alone:
// two replicas at the same index write identical snapshots, and a reader
// rejects a repeated key without a lookup. The whole table is the state:
// there are no waiters, deadlines or sessions in the FSM to carry. A
// holder's lease is its current one, as the last Extend set it.
//
// A version 1 entry is a holder never extended (count 0), and versions 1
// and 2 carry no feature bit (features 0). Version 3 exists because version
// 2 has no room for the features: its layout is fixed, and a version 2
// reader (commit 04b0080) would take them for part of the first entry.
//
// WriteSnapshot writes the oldest version that carries the state: version 1
// when no holder has been extended and no feature is on, so a cluster that
// never extends writes the bytes it always wrote, and a node of a latch
// that knows only version 1 (such as commit 653a820) can still restore its
// snapshots during a rolling upgrade; version 2 when a holder has been
// extended but no feature is on, which a latch that predates features still
// reads; version 3 once a feature is on. An older node refuses a newer version by its
// version byte before reading anything (ErrSnapshotVersion); it meets one
// only after an Enable, which the leader proposes once every member
// supports the feature, so none is left that cannot read it. ReadSnapshot
// reads all three and, as for batches, accepts exactly what WriteSnapshot
// writes: a version 2 snapshot holds at least one extended holder, a
// version 3 one has features other than 0. A version 3 snapshot whose
// features this latch does not all know is refused as ErrSnapshotVersion
// (a newer latch wrote it), once its checksum has verified; before that, a
// damaged features field is ErrSnapshotCorrupt like any other byte.

// Snapshot format versions. SnapshotVersion is the newest; ReadSnapshot
// reads every version from 1 to SnapshotVersion and refuses any other.
const (
	snapshotV1      = 1
	snapshotV2      = 2
	snapshotV3      = 3
	SnapshotVersion = snapshotV3
)

var snapshotMagic = [8]byte{'L', 'A', 'T', 'C', 'H', 'S', 'N', 'P'}

const (
	snapshotHeaderLen = 8 + 1 + 8 + 8 + 8 // versions 1 and 2; version 3 adds features u32
	maxEntryLen       = 1 + MaxKeyLen + 8 + 2 + 4
	snapshotBufSize   = 64 << 10
	// restoreSizeHint caps the map size taken on trust from a header whose
	// checksum is not yet known: a corrupt count must not allocate without
	// bound before the entries run out.
	restoreSizeHint = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot errors. ReadSnapshot wraps one of them with the detail.
var (
	// ErrSnapshotFormat: the data does not start with the snapshot magic; it
	// is not a latch snapshot at all.
	ErrSnapshotFormat = errors.New("fsm: not a latch snapshot (wrong magic): check which file was given")
	// ErrSnapshotVersion: a snapshot format this latch does not know, or
	// a snapshot with a feature bit it does not know (see Features).
	ErrSnapshotVersion = errors.New("fsm: snapshot has a format version or a feature this latch does not know: " +
		"it was written by a newer latch; restore it with that version")
	// ErrSnapshotCorrupt: truncated, failed its checksum, or holds an
	// entry no table could have written. Restore from another snapshot or
	// let a peer send its own.
	ErrSnapshotCorrupt = errors.New("fsm: snapshot is corrupt")
	// ErrSnapshotEntry: WriteSnapshot found an entry a snapshot cannot
	// carry (key or lease out of range, token 0 or above the last token),
	// or features with a bit this latch does not know.
	// Only a table filled through ApplyCommand is guaranteed to have none.
	ErrSnapshotEntry = errors.New("fsm: table holds an entry outside the snapshot's ranges; " +
		"fill tables through ApplyCommand, which validates every command")
)

// snapEntry is one held key in a point-in-time copy of a table. The key
// string is shared with the table (strings are immutable), so a copy costs
// 32 bytes per key.
type snapEntry struct {
	key string
	h   Holder
}

// tableCopy is an immutable copy of a table's state.
type tableCopy struct {
	index    uint64
	last     Token
	features Features
	entries  []snapEntry
}

// copyState takes a point-in-time copy of t; t may change afterwards.
func (t *Table) copyState(index uint64) *tableCopy {
	c := &tableCopy{index: index, last: t.last, features: t.features, entries: make([]snapEntry, 0, len(t.held))}
	for k, h := range t.held {
		c.entries = append(c.entries, snapEntry{key: k, h: h})
	}
	return c
}

// WriteSnapshot writes t, as it reflects raft index index (0 outside
// raft), to w in the snapshot format. It copies the table first, so t is
// not used after it returns, but the caller must keep t from changing while
// it copies. It does not close w.
func WriteSnapshot(w io.Writer, t *Table, index uint64) error {
	return t.copyState(index).write(w)
}

// write sorts c's entries (in place; the copy is c's own) and writes them.
func (c *tableCopy) write(w io.Writer) error {
	slices.SortFunc(c.entries, func(a, b snapEntry) int { return strings.Compare(a.key, b.key) })

	buf := make([]byte, 0, snapshotBufSize)
	var crc uint32
	flush := func() error {
		crc = crc32.Update(crc, castagnoli, buf)
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	if u := c.features &^ KnownFeatures; u != 0 {
		return fmt.Errorf("%w: features %v", ErrSnapshotEntry, c.features)
	}
	v := byte(snapshotV1)
	switch {
	case c.features != 0:
		v = snapshotV3
	case slices.ContainsFunc(c.entries, func(e snapEntry) bool { return e.h.Extensions != 0 }):
		v = snapshotV2
	}
	buf = append(buf, snapshotMagic[:]...)
	buf = append(buf, v)
	buf = binary.BigEndian.AppendUint64(buf, c.index)
	buf = binary.BigEndian.AppendUint64(buf, uint64(c.last))
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(c.entries)))
	if v == snapshotV3 {
		buf = binary.BigEndian.AppendUint32(buf, uint32(c.features))
	}
	for _, e := range c.entries {
		if len(e.key) == 0 || len(e.key) > MaxKeyLen || e.h.Lease == 0 || e.h.Lease > MaxLease ||
			e.h.Token == 0 || e.h.Token > c.last {
			return fmt.Errorf("%w: key %q holder %+v, last token %d", ErrSnapshotEntry, e.key, e.h, c.last)
		}
		if len(buf)+maxEntryLen > cap(buf) {
			if err := flush(); err != nil {
				return err
			}
		}
		buf = append(buf, byte(len(e.key)))
		buf = append(buf, e.key...)
		buf = binary.BigEndian.AppendUint64(buf, uint64(e.h.Token))
		buf = binary.BigEndian.AppendUint16(buf, e.h.Lease)
		if v != snapshotV1 {
			buf = binary.BigEndian.AppendUint32(buf, e.h.Extensions)
		}
	}
	crc = crc32.Update(crc, castagnoli, buf)
	buf = binary.BigEndian.AppendUint32(buf, crc)
	_, err := w.Write(buf)
	return err
}

// ReadSnapshot reads a whole snapshot, of any version from 1 to
// SnapshotVersion, from r and returns it as a new table, with the raft
// index it reflects; a version 1 or 2 snapshot restores with features 0.
// It checks the magic and version first, every entry's ranges and order as
// it goes, then the checksum, that nothing follows it, and the features;
// any failure returns an error wrapping
// ErrSnapshotFormat, ErrSnapshotVersion or ErrSnapshotCorrupt (or r's own
// read error) and no table. It never panics on any input. It does not close
// r.
//
// It does not check that tokens are unique across keys: a table never
// writes duplicates, and the checksum catches accidental damage.
func ReadSnapshot(r io.Reader) (*Table, uint64, error) {
	br := bufio.NewReaderSize(r, snapshotBufSize)
	hdr, err := br.Peek(snapshotHeaderLen)
	if !bytes.HasPrefix(hdr, snapshotMagic[:min(len(hdr), len(snapshotMagic))]) {
		return nil, 0, ErrSnapshotFormat
	}
	if len(hdr) <= len(snapshotMagic) {
		return nil, 0, corrupt(err, "truncated in the header")
	}
	v := hdr[8]
	if v < snapshotV1 || v > SnapshotVersion {
		return nil, 0, fmt.Errorf("%w: version %d, this latch reads 1 to %d", ErrSnapshotVersion, v, SnapshotVersion)
	}
	tail, hdrLen := 8+2, snapshotHeaderLen // token, lease
	if v != snapshotV1 {
		tail += 4 // extensions
	}
	if v == snapshotV3 {
		hdrLen += 4 // features
		hdr, err = br.Peek(hdrLen)
	}
	if len(hdr) < hdrLen {
		return nil, 0, corrupt(err, "truncated in the header")
	}
	crc := crc32.Update(0, castagnoli, hdr)
	index := binary.BigEndian.Uint64(hdr[9:])
	last := Token(binary.BigEndian.Uint64(hdr[17:]))
	count := binary.BigEndian.Uint64(hdr[25:])
	var features Features
	if v == snapshotV3 {
		features = Features(binary.BigEndian.Uint32(hdr[33:]))
	}
	if last > MaxToken {
		return nil, 0, corrupt(nil, fmt.Sprintf("last token %d is above 2^63-1", last))
	}
	if count > uint64(last) {
		return nil, 0, corrupt(nil, fmt.Sprintf("%d keys held but only %d tokens issued", count, last))
	}
	if _, err := br.Discard(hdrLen); err != nil {
		return nil, 0, corrupt(err, "truncated in the header")
	}

	t := &Table{held: make(map[string]Holder, min(count, restoreSizeHint)), last: last, features: features}
	var prev string
	extended := false
	for i := range count {
		b, err := br.Peek(1)
		if err != nil {
			return nil, 0, corrupt(err, fmt.Sprintf("truncated at entry %d of %d", i, count))
		}
		kl := int(b[0])
		if kl == 0 || kl > MaxKeyLen {
			return nil, 0, corrupt(nil, fmt.Sprintf("entry %d has a %d-byte key", i, kl))
		}
		n := 1 + kl + tail
		b, err = br.Peek(n)
		if err != nil {
			return nil, 0, corrupt(err, fmt.Sprintf("truncated at entry %d of %d", i, count))
		}
		crc = crc32.Update(crc, castagnoli, b)
		key := b[1 : 1+kl]
		h := Holder{
			Token: Token(binary.BigEndian.Uint64(b[1+kl:])),
			Lease: binary.BigEndian.Uint16(b[1+kl+8:]),
		}
		if v != snapshotV1 {
			h.Extensions = binary.BigEndian.Uint32(b[1+kl+10:])
			extended = extended || h.Extensions != 0
		}
		if h.Token == 0 || h.Token > last || h.Lease == 0 || h.Lease > MaxLease {
			return nil, 0, corrupt(nil, fmt.Sprintf("entry %d holder %+v out of range (last token %d)", i, h, last))
		}
		if i > 0 && string(key) <= prev {
			return nil, 0, corrupt(nil, fmt.Sprintf("entry %d is out of order or repeated", i))
		}
		prev = string(key)
		t.held[prev] = h
		_, _ = br.Discard(n) // n bytes are buffered: Peek returned them
	}
	var sum [4]byte
	if _, err := io.ReadFull(br, sum[:]); err != nil {
		return nil, 0, corrupt(err, "truncated before the checksum")
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != crc {
		return nil, 0, corrupt(nil, fmt.Sprintf("checksum %08x, computed %08x", got, crc))
	}
	switch _, err := br.ReadByte(); {
	case err == nil:
		return nil, 0, corrupt(nil, "data after the checksum")
	case !errors.Is(err, io.EOF):
		return nil, 0, fmt.Errorf("fsm: reading snapshot: %w", err)
	}
	switch {
	case v == snapshotV2 && !extended:
		return nil, 0, corrupt(nil, "a version 2 snapshot without an extended holder (version 1 carries that state)")
	case v == snapshotV3 && features == 0:
		return nil, 0, corrupt(nil, "a version 3 snapshot without features (version 1 or 2 carries that state)")
	case features&^KnownFeatures != 0:
		return nil, 0, fmt.Errorf("%w: it has features %v, this latch knows %v", ErrSnapshotVersion, features, KnownFeatures)
	}
	return t, index, nil
}

// corrupt wraps ErrSnapshotCorrupt with what went wrong. A read error other
// than a short read is the reader's, not the snapshot's, and is returned as
// such.
func corrupt(err error, what string) error {
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("fsm: reading snapshot (%s): %w", what, err)
	}
	return fmt.Errorf("%w: %s", ErrSnapshotCorrupt, what)
}
