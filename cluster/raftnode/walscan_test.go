package raftnode

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// walFixture is a raft log written by raft-wal itself in dataDir/wal: entries 1..n in
// batches of batch, in segments of segSize bytes (small, so that several are sealed).
type walFixture struct {
	dataDir string
	n       int
}

func writeWAL(t *testing.T, n, batch int, segSize int) walFixture {
	t.Helper()
	f := walFixture{dataDir: t.TempDir(), n: n}
	w := f.open(t, segSize)
	for i := 1; i <= n; i += batch {
		var es []*raft.Log
		for j := i; j < i+batch && j <= n; j++ {
			es = append(es, &raft.Log{Index: uint64(j), Term: 1 + uint64(j)/50, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(j)}, 40+j%7)})
		}
		if err := w.StoreLogs(es); err != nil {
			t.Fatal(err)
		}
	}
	f.close(t, w)
	return f
}

func (f walFixture) open(t *testing.T, segSize int) *wal.WAL {
	t.Helper()
	dir := filepath.Join(f.dataDir, "wal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if segSize == 0 {
		segSize = 64 << 20 // raft-wal's default, as latch runs it
	}
	w, err := wal.Open(dir, wal.WithMetaStore(&metadb.BoltMetaDB{}), wal.WithSegmentSize(segSize))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (f walFixture) close(t *testing.T, w *wal.WAL) {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// segments are the segment files, oldest first (the tail last).
func (f walFixture) segments(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(f.dataDir, "wal", "*.wal"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no segments: %v", err)
	}
	sort.Strings(files)
	return files
}

// rewrite changes a file's bytes in place.
func rewrite(t *testing.T, path string, fn func(b []byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dataEnd is the offset past the last non-zero byte of b.
func dataEnd(b []byte) int { return len(bytes.TrimRight(b, "\x00")) }

// commitFrames are the offsets of b's commit frames, found by walking its frames.
func commitFrames(b []byte) []int {
	var out []int
	for off := walFileHeaderLen; off+walFrameHeaderLen <= len(b); {
		switch b[off] {
		case walFrameEntry, walFrameIndex:
			off += frameSize(int(binary.LittleEndian.Uint32(b[off+4:])))
		case walFrameCommit:
			out = append(out, off)
			off += walFrameHeaderLen
		default:
			return out
		}
	}
	return out
}

// raftWALLast is the last index raft-wal itself serves from the fixture.
func (f walFixture) raftWALLast(t *testing.T) uint64 {
	t.Helper()
	w := f.open(t, 0)
	defer f.close(t, w)
	last, err := w.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return last
}

func TestScanWALHealthy(t *testing.T) {
	f := writeWAL(t, 400, 7, 4096)
	if n := len(f.segments(t)); n < 3 {
		t.Fatalf("%d segments, want several sealed ones", n)
	}
	scan, err := scanWAL(f.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if scan.last() != 400 {
		t.Fatalf("last %d, want 400", scan.last())
	}
	for _, i := range []uint64{1, 49, 50, 399, 400} {
		if term, ok := scan.term(i); !ok || term != 1+i/50 {
			t.Fatalf("term of %d = %d %v, want %d", i, term, ok, 1+i/50)
		}
	}
	if tl := scan.tail(); tl == nil || tl.torn != "" || tl.missing {
		t.Fatalf("tail %+v, want an intact one", tl)
	}
}

func TestScanWALNoLog(t *testing.T) {
	scan, err := scanWAL(t.TempDir())
	if err != nil || scan.last() != 0 {
		t.Fatalf("empty dir: %d %v", scan.last(), err)
	}
}

// Damage that raft-wal does not notice (or repairs by deleting data) is refused, naming
// what is wrong. Each case also checks what raft-wal alone would have done, so that the
// case is one the scan is needed for.
func TestScanWALRefusesDamage(t *testing.T) {
	cases := []struct {
		name        string
		damage      func(t *testing.T, f walFixture)
		want        string
		walServesIt bool // raft-wal alone serves the whole log as if nothing happened
	}{
		{
			name: "garbage in a sealed segment's entries",
			damage: func(t *testing.T, f walFixture) {
				rewrite(t, f.segments(t)[0], func(b []byte) []byte {
					for i := 100; i < 140; i++ { // inside the first entries' payloads
						b[i] ^= 0x5a
					}
					return b
				})
			},
			want:        "sealed segment",
			walServesIt: true,
		},
		{
			name: "a sealed segment truncated",
			damage: func(t *testing.T, f walFixture) {
				rewrite(t, f.segments(t)[0], func(b []byte) []byte { return b[:dataEnd(b)/2] })
			},
			want: "sealed segment",
		},
		{
			name:   "a sealed segment deleted",
			damage: func(t *testing.T, f walFixture) { os.Remove(f.segments(t)[0]) },
			want:   "is missing",
		},
		{
			name:   "wal-meta.db deleted",
			damage: func(t *testing.T, f walFixture) { os.Remove(filepath.Join(f.dataDir, "wal", metadb.FileName)) },
			want:   "delete them",
		},
		{
			name: "garbage in the tail with intact batches after it",
			damage: func(t *testing.T, f walFixture) {
				segs := f.segments(t)
				rewrite(t, segs[len(segs)-1], func(b []byte) []byte {
					c := commitFrames(b)
					if len(c) < 4 {
						t.Fatalf("tail has %d batches", len(c))
					}
					_, _ = rand.Read(b[c[0]+8 : c[1]]) // the second batch, headers and all
					return b
				})
			},
			want: "an intact batch follows",
		},
		{
			name: "payload bytes of a middle tail batch changed, headers intact",
			damage: func(t *testing.T, f walFixture) {
				segs := f.segments(t)
				rewrite(t, segs[len(segs)-1], func(b []byte) []byte {
					c := commitFrames(b)
					b[c[1]-8] ^= 0xff // the last padding/payload byte before the second commit
					return b
				})
			},
			want:        "fails its checksum",
			walServesIt: true,
		},
		{
			name: "zeros over the middle of the tail",
			damage: func(t *testing.T, f walFixture) {
				segs := f.segments(t)
				rewrite(t, segs[len(segs)-1], func(b []byte) []byte {
					c := commitFrames(b)
					clear(b[c[0]+8 : c[1]+8])
					return b
				})
			},
			want: "an intact batch follows",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := writeWAL(t, 400, 7, 16384)
			tc.damage(t, f)
			_, err := scanWAL(f.dataDir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("scan: %v, want an error saying %q", err, tc.want)
			}
			wantBroken(t, err, f.dataDir)
			if tc.walServesIt {
				if last := f.raftWALLast(t); last != uint64(f.n) {
					t.Fatalf("raft-wal alone serves up to %d, not the whole log: the case needs no scan", last)
				}
			}
		})
	}
}

// A torn tail (the last write never reached the disk) is what a crash leaves: it passes,
// and the scan ends where raft-wal's own recovery ends.
func TestScanWALTornTailPasses(t *testing.T) {
	cases := []struct {
		name   string
		damage func(b []byte) []byte
		last   uint64
	}{
		{"the last batch's commit frame lost", func(b []byte) []byte {
			c := commitFrames(b)
			clear(b[c[len(c)-1] : c[len(c)-1]+8])
			return b
		}, 399},
		{"the last batch's bytes half written", func(b []byte) []byte {
			c := commitFrames(b)
			start, end := c[len(c)-2]+8, c[len(c)-1]+8
			_, _ = rand.Read(b[(start+end)/2 : end])
			return b
		}, 399},
		{"a partial batch after the last commit", func(b []byte) []byte {
			end := dataEnd(b)
			end = (end + 7) / 8 * 8
			binary.LittleEndian.PutUint32(b[end+4:], 60)
			b[end] = walFrameEntry
			_, _ = rand.Read(b[end+8 : end+40])
			return b
		}, 400},
		{"the file cut inside the last batch", func(b []byte) []byte {
			c := commitFrames(b)
			return b[:c[len(c)-1]-4]
		}, 399},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// 400 entries in batches of 3: the last batch holds entry 400 alone.
			f := writeWAL(t, 400, 3, 0)
			segs := f.segments(t)
			rewrite(t, segs[len(segs)-1], tc.damage)
			scan, err := scanWAL(f.dataDir)
			if err != nil {
				t.Fatal(err)
			}
			if scan.last() != tc.last {
				t.Fatalf("scan ends at %d, want %d", scan.last(), tc.last)
			}
			if got := f.raftWALLast(t); got != scan.last() {
				t.Fatalf("raft-wal ends at %d, the scan at %d", got, scan.last())
			}
		})
	}
}

// A missing tail is reported to the caller (which compares it with the promise), not
// refused: raft-wal creates the tail's file after its metadata, so a crash can lose it
// before anything was written to it.
func TestScanWALMissingTail(t *testing.T) {
	f := writeWAL(t, 100, 5, 4096)
	segs := f.segments(t)
	if err := os.Remove(segs[len(segs)-1]); err != nil {
		t.Fatal(err)
	}
	scan, err := scanWAL(f.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if tl := scan.tail(); tl == nil || !tl.missing {
		t.Fatalf("tail %+v, want missing", tl)
	}
	if scan.last() == 0 || scan.last() >= 100 {
		t.Fatalf("last %d, want the sealed segments' end", scan.last())
	}
}
