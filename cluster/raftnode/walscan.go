package raftnode

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// The raft log's files, checked before raft-wal opens them (walscan).
//
// What raft-wal checks itself (v0.4.2, read from its code): at open it reads wal-meta.db's
// list of segments, validates each sealed segment's file header, and reads the tail segment
// frame by frame until the first zero or undecodable frame header, checking the checksum of
// the last commit batch only. It assumes that data it once fsynced never changes ("we assume
// that previously committed data is not silently corrupted", segment/writer.go). So it does
// not notice, and serves as if nothing happened:
//
//   - a damaged batch inside a segment (garbage over entries whose frame headers still
//     parse, in a sealed segment or before the tail's last batch): sealed segments are read
//     through their index block, with no checksum at all;
//   - damage in the tail that breaks the frame chain: everything after it is treated as a
//     torn write and dropped, even intact batches;
//   - a missing tail segment file: it creates an empty one;
//   - a missing wal-meta.db: it starts an empty log and deletes every segment file.
//
// scanWAL does what it lacks, reading every segment listed in wal-meta.db once: every
// batch's CRC-32C (raft-wal's own checksum: a commit frame's CRC covers every byte since the
// previous commit frame, the first one the file header too), every entry's index in
// sequence, sealed segments complete up to their index block. A torn tail (a last write that
// never reached the disk) is the normal result of a crash and passes; damage with intact
// batches after it (which no crash can leave, since raft-wal fsyncs every batch before it
// writes the next) is refused.

// raft-wal's segment format (segment/format.go), which scanWAL reads itself.
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walMagic          = 0x58eb6b0d
	walVersion        = 0
	walFrameEntry     = 1
	walFrameIndex     = 2
	walFrameCommit    = 3
	walMaxEntrySize   = 64 << 20
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// walSegment is one segment file as scanWAL found it.
type walSegment struct {
	info    types.SegmentInfo
	file    string
	missing bool     // the tail's file does not exist (raft-wal would create it empty)
	terms   []uint64 // the term of each committed entry, from info.BaseIndex on
	torn    string   // the tail's last write is torn here (dropped, as raft-wal drops it)
}

// first and last are the indexes the segment serves (last 0: none).
func (s *walSegment) first() uint64 { return max(s.info.BaseIndex, s.info.MinIndex) }

func (s *walSegment) last() uint64 {
	if s.info.SealTime.IsZero() {
		if len(s.terms) == 0 {
			return 0
		}
		return s.info.BaseIndex + uint64(len(s.terms)) - 1
	}
	return s.info.MaxIndex
}

// walScan is what the raft log holds, as scanWAL verified it.
type walScan struct {
	dir      string
	segments []walSegment
}

// last is the last verified index of the log (0: empty).
func (w *walScan) last() uint64 {
	for i := len(w.segments) - 1; i >= 0; i-- {
		if l := w.segments[i].last(); l > 0 {
			return l
		}
	}
	return 0
}

// term is the term of entry i, if the log holds it.
func (w *walScan) term(i uint64) (uint64, bool) {
	for k := range w.segments {
		s := &w.segments[k]
		if l := s.last(); l > 0 && i >= s.first() && i <= l {
			return s.terms[i-s.info.BaseIndex], true
		}
	}
	return 0, false
}

// tail is the unsealed segment, or nil.
func (w *walScan) tail() *walSegment {
	if n := len(w.segments); n > 0 && w.segments[n-1].info.SealTime.IsZero() {
		return &w.segments[n-1]
	}
	return nil
}

// walBroken is the error for damage found in the log.
func walBroken(dataDir, what string) error {
	return broken(dataDir, what, errors.New("the raft log is damaged"))
}

// scanWAL verifies the raft log in dataDir/wal (see the top of this file). It changes
// nothing. A log that was never created scans as empty.
func scanWAL(dataDir string) (walScan, error) {
	dir := filepath.Join(dataDir, "wal")
	scan := walScan{dir: dir}
	metaPath := filepath.Join(dir, metadb.FileName)
	files, err := segmentFiles(dir)
	if err != nil {
		return scan, broken(dataDir, "list "+dir, err)
	}
	if _, err := os.Stat(metaPath); errors.Is(err, os.ErrNotExist) {
		if len(files) > 0 {
			return scan, walBroken(dataDir, fmt.Sprintf("%s is missing beside %d segment files (%s): "+
				"raft-wal would start an empty log and delete them", metaPath, len(files), strings.Join(files, ", ")))
		}
		return scan, nil
	} else if err != nil {
		return scan, broken(dataDir, "read "+metaPath, err)
	}
	state, err := readWALMeta(metaPath)
	if err != nil {
		return scan, broken(dataDir, "read "+metaPath, err)
	}
	for i, info := range state.Segments {
		sealed := !info.SealTime.IsZero()
		if !sealed && i != len(state.Segments)-1 {
			return scan, walBroken(dataDir, fmt.Sprintf("%s lists an unsealed segment (base index %d) before the last", metaPath, info.BaseIndex))
		}
		seg, err := scanSegment(dir, info)
		if err != nil {
			return scan, walBroken(dataDir, err.Error())
		}
		scan.segments = append(scan.segments, seg)
	}
	return scan, nil
}

// segmentFiles lists the segment files in dir (none if dir does not exist).
func segmentFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".wal") {
			out = append(out, e.Name())
		}
	}
	return out, err
}

// readWALMeta reads raft-wal's persisted state from its bolt file, read-only.
func readWALMeta(path string) (types.PersistentState, error) {
	var state types.PersistentState
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: boltOpenTimeout})
	if err != nil {
		return state, err
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(metadb.MetaBucket))
		if b == nil {
			return nil
		}
		raw := b.Get([]byte(metadb.MetaKey))
		if raw == nil {
			return nil
		}
		return json.Unmarshal(raw, &state)
	})
	return state, err
}

// scanSegment reads one segment file and verifies it (the rules at the top of this file).
// Its error says what is wrong, naming the file.
func scanSegment(dir string, info types.SegmentInfo) (walSegment, error) {
	path := filepath.Join(dir, segment.FileName(info))
	seg := walSegment{info: info, file: path}
	sealed := !info.SealTime.IsZero()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if sealed {
			return seg, fmt.Errorf("segment %s (entries %d to %d), listed in %s, is missing", path, seg.first(), info.MaxIndex, metadb.FileName)
		}
		seg.missing = true
		return seg, nil
	}
	if err != nil {
		return seg, fmt.Errorf("read segment %s: %w", path, err)
	}
	w := walk(data, info)
	seg.terms = w.terms
	switch {
	case sealed && (w.bad != "" || !w.sealed):
		why := w.bad
		if why == "" {
			why = fmt.Sprintf("it ends at offset %d before its index block", w.end)
		}
		return seg, fmt.Errorf("sealed segment %s: %s", path, why)
	case sealed && uint64(len(w.terms)) < info.MaxIndex-info.BaseIndex+1:
		return seg, fmt.Errorf("sealed segment %s holds %d entries, but %s says it ends at index %d", path, len(w.terms), metadb.FileName, info.MaxIndex)
	case sealed:
		return seg, nil
	}
	if len(w.terms) > 0 && w.header != "" {
		return seg, fmt.Errorf("segment %s: %s", path, w.header)
	}
	if w.bad != "" || w.end < len(data) {
		// The tail stops early. A crash tears at most the last batch, and the file is
		// preallocated with zeros, so an intact batch after the stop means damage.
		if at, ok := intactBatchAfter(data, w.end); ok {
			why := w.bad
			if why == "" {
				why = fmt.Sprintf("zeroed bytes at offset %d", w.end)
			}
			return seg, fmt.Errorf("segment %s: %s, but an intact batch follows at offset %d: "+
				"a record inside the segment is damaged (a crash only tears the last write)", path, why, at)
		}
		seg.torn = w.bad
	}
	return seg, nil
}

// walkResult is what walk found in a segment file.
type walkResult struct {
	terms  []uint64 // the terms of the entries of every verified batch
	end    int      // the offset just past the last verified batch
	sealed bool     // the last verified batch holds the index block
	bad    string   // why the walk stopped early ("": at zeros or at the end of the file)
	header string   // what is wrong with the file header, if anything
}

// walk reads a segment's frames from the start, verifying each batch, and stops at the
// first zero frame header, the end of the file, the commit after an index block, or the
// first thing that is wrong (bad).
func walk(data []byte, info types.SegmentInfo) walkResult {
	var r walkResult
	r.header = checkSegmentHeader(data, info)
	if len(data) < walFileHeaderLen {
		return r
	}
	var pending []uint64
	batch, off := 0, walFileHeaderLen
	r.end = walFileHeaderLen
	index := false
	for off+walFrameHeaderLen <= len(data) {
		h := data[off : off+walFrameHeaderLen]
		switch h[0] {
		case 0:
			if binary.LittleEndian.Uint64(h) != 0 {
				r.bad = fmt.Sprintf("a frame header at offset %d is not valid", off)
			}
			return r
		case walFrameEntry, walFrameIndex:
			n := int(binary.LittleEndian.Uint32(h[4:]))
			size := frameSize(n)
			if n > walMaxEntrySize || off+size > len(data) {
				r.bad = fmt.Sprintf("the frame at offset %d runs past the end of the file", off)
				return r
			}
			if h[0] == walFrameIndex {
				index = true
			} else {
				want := info.BaseIndex + uint64(len(r.terms)+len(pending))
				idx, term, ok := entryIndexTerm(data[off+walFrameHeaderLen : off+walFrameHeaderLen+n])
				if !ok || idx != want {
					r.bad = fmt.Sprintf("the entry at offset %d holds index %d, expected %d", off, idx, want)
					return r
				}
				pending = append(pending, term)
			}
			off += size
		case walFrameCommit:
			if crc32.Checksum(data[batch:off], walCRC) != binary.LittleEndian.Uint32(h[4:]) {
				r.bad = fmt.Sprintf("the batch at offsets %d to %d fails its checksum", batch, off)
				return r
			}
			r.terms = append(r.terms, pending...)
			pending = pending[:0]
			off += walFrameHeaderLen
			batch, r.end = off, off
			if index {
				r.sealed = true
				return r
			}
		default:
			r.bad = fmt.Sprintf("the frame at offset %d has unknown type %d", off, h[0])
			return r
		}
	}
	return r
}

// checkSegmentHeader says what is wrong with a segment's file header ("" if nothing).
func checkSegmentHeader(data []byte, info types.SegmentInfo) string {
	if len(data) < walFileHeaderLen {
		return "the file is shorter than its header"
	}
	if binary.LittleEndian.Uint32(data[0:4]) != walMagic || data[7] != walVersion {
		return "the file header is not a raft-wal segment header"
	}
	base, id, codec := binary.LittleEndian.Uint64(data[8:]), binary.LittleEndian.Uint64(data[16:]), binary.LittleEndian.Uint64(data[24:])
	if base != info.BaseIndex || id != info.ID || codec != info.Codec {
		return fmt.Sprintf("the file header (base index %d, id %x, codec %d) does not match %s (%d, %x, %d)",
			base, id, codec, metadb.FileName, info.BaseIndex, info.ID, info.Codec)
	}
	return ""
}

// frameSize is a frame's size on disk: header, payload, padding to 8 bytes.
func frameSize(n int) int {
	return walFrameHeaderLen + (n+walFrameHeaderLen-1)/walFrameHeaderLen*walFrameHeaderLen
}

// entryIndexTerm decodes the index and term at the start of an entry's payload (raft-wal's
// BinaryCodec: uvarint index, uvarint term, ...).
func entryIndexTerm(p []byte) (index, term uint64, ok bool) {
	index, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, 0, false
	}
	term, m := binary.Uvarint(p[n:])
	return index, term, m > 0 && index > 0
}

// intactBatchAfter looks for a whole batch (entry frames ending in a commit frame whose
// checksum covers them) starting at an 8-byte boundary at or after from, and returns its
// offset. The checksum of a batch covers it from its own start, so a fragment of a torn
// batch never passes.
func intactBatchAfter(data []byte, from int) (int, bool) {
	from = (from + walFrameHeaderLen - 1) / walFrameHeaderLen * walFrameHeaderLen
	for o := from; o+walFrameHeaderLen <= len(data); o += walFrameHeaderLen {
		if data[o] != walFrameEntry {
			continue
		}
		p, entries := o, 0
		for p+walFrameHeaderLen <= len(data) {
			h := data[p : p+walFrameHeaderLen]
			if h[0] == walFrameCommit {
				if entries > 0 && crc32.Checksum(data[o:p], walCRC) == binary.LittleEndian.Uint32(h[4:]) {
					return o, true
				}
				break
			}
			if h[0] != walFrameEntry && h[0] != walFrameIndex {
				break
			}
			n := int(binary.LittleEndian.Uint32(h[4:]))
			if n > walMaxEntrySize || p+frameSize(n) > len(data) {
				break
			}
			if h[0] == walFrameEntry {
				if _, _, ok := entryIndexTerm(data[p+walFrameHeaderLen : p+walFrameHeaderLen+n]); !ok {
					break
				}
				entries++
			}
			p += frameSize(n)
		}
	}
	return 0, false
}
