package fsm

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// The files in testdata were written by older latch builds and must never
// be regenerated: they are what logs and snapshots on disk hold.
//
//   - batch_v1.txt (commit 28a4f08, whose only batch and snapshot format
//     was version 1): command lists (random, with edge cases: empty and
//     255-byte keys, leases 0 and 65535, tokens 0 and 2^64-1, fields a kind
//     does not use set) and the version 1 batch that commit encoded for each.
//   - log_v1.txt (commit 28a4f08): a log of version 1 entries (grants,
//     releases, expiries, floors, invalid commands), the results that commit
//     applied each to, and the snapshot it wrote at the end.
//   - log_v2.txt (commit 04b0080, the last before the feature switch): a
//     log of version 1 and version 2 entries (extends, expiries for
//     extension counts, invalid extends), the results that commit applied
//     each to, and the version 2 snapshot it wrote at the end.
//   - log_features.txt (commit 7ad3526, which added CmdEnable): a log with
//     Enables among version 1 and version 2 entries, the results that
//     commit applied each to (with the features of each Enabled), and the
//     version 3 snapshot it wrote at the end.

// goldenLines returns the lines of a testdata file without its comments.
func goldenLines(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

func goldenHex(t *testing.T, s string) []byte {
	t.Helper()
	if s == "-" {
		return []byte{}
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func goldenUint(t *testing.T, s string, bits int) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGoldenV1Batches: a batch that version 1 carries is written byte for
// byte as latch wrote it before version 2, so a cluster that never extends
// keeps writing entries that older nodes read, and reads back the same
// commands.
func TestGoldenV1Batches(t *testing.T) {
	lines := goldenLines(t, "batch_v1.txt")
	if len(lines) < 60 {
		t.Fatalf("%d golden batches", len(lines))
	}
	for i, line := range lines {
		text, hexData, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("line %d: no tab", i)
		}
		var cmds []Command
		if text != "-" {
			for _, f := range strings.Fields(text) {
				p := strings.Split(f, "/")
				if len(p) != 4 {
					t.Fatalf("line %d: command %q", i, f)
				}
				cmds = append(cmds, Command{
					Kind:  CommandKind(goldenUint(t, p[0], 8)),
					Key:   goldenHex(t, p[1]),
					Lease: uint16(goldenUint(t, p[2], 16)),
					Token: Token(goldenUint(t, p[3], 64)),
				})
			}
		}
		want := goldenHex(t, hexData)
		got, err := AppendBatch(nil, cmds)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("line %d: AppendBatch = %x, %v\nwant %x", i, got, err, want)
		}
		dec, err := DecodeBatch(want, nil)
		if err != nil || len(dec) != len(cmds) {
			t.Fatalf("line %d: DecodeBatch: %d commands, %v", i, len(dec), err)
		}
		for j := range dec {
			if c := canonical(cmds[j]); !sameCommand(dec[j], c) {
				t.Fatalf("line %d command %d: decoded %+v, want %+v", i, j, dec[j], c)
			}
		}
	}
}

// replayGoldenLog applies the log in a testdata file to a new FSM,
// checking every result against the file and that every entry re-encodes
// to its bytes, and returns the FSM and the snapshot the file ends with.
// Results have nfields fields: 5 (kind, token, holder token, lease, key), 6
// (the holder's extension count before the key) or 7 (and the features
// after it).
func replayGoldenLog(t *testing.T, name string, nfields int) (*FSM, []byte) {
	t.Helper()
	lines := goldenLines(t, name)
	kinds := map[string]ResultKind{}
	for k := Granted; k <= lastResultKind; k++ {
		kinds[k.String()] = k
	}
	f := newFSM(t, 0)
	var (
		res     []Result
		at      int // the next result of res to compare
		index   uint64
		entries int
		snap    []byte
	)
	for i, line := range lines {
		fields := strings.Fields(line)
		switch {
		case fields[0] == "entry" && len(fields) == 3:
			if at != len(res) {
				t.Fatalf("line %d: entry %d answered %d results, the file has %d", i, index, len(res), at)
			}
			index = goldenUint(t, fields[1], 64)
			data := goldenHex(t, fields[2])
			cmds, err := DecodeBatch(data, nil)
			if err != nil {
				t.Fatalf("line %d: DecodeBatch: %v", i, err)
			}
			if again, err := AppendBatch(nil, cmds); err != nil || !bytes.Equal(again, data) {
				t.Fatalf("line %d: entry %d re-encodes to %x, %v", i, index, again, err)
			}
			res = results(t, f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}))
			at = 0
			entries++
		case fields[0] == "snapshot" && len(fields) == 2:
			snap = goldenHex(t, fields[1])
		case len(fields) == nfields:
			k, ok := kinds[fields[0]]
			if !ok {
				t.Fatalf("line %d: result kind %q", i, fields[0])
			}
			want := Result{
				Kind:   k,
				Token:  Token(goldenUint(t, fields[1], 64)),
				Holder: Holder{Token: Token(goldenUint(t, fields[2], 64)), Lease: uint16(goldenUint(t, fields[3], 16))},
				Key:    string(goldenHex(t, fields[nfields-1])),
			}
			if nfields >= 6 {
				want.Holder.Extensions = uint32(goldenUint(t, fields[4], 32))
			}
			if nfields >= 7 {
				want.Features = Features(goldenUint(t, fields[5], 32))
			}
			if at >= len(res) || res[at] != want {
				t.Fatalf("line %d: entry %d result %d = %+v, want %+v", i, index, at, res[min(at, len(res)-1)], want)
			}
			at++
		default:
			t.Fatalf("line %d: %q", i, line)
		}
	}
	if entries < 100 || snap == nil || at != len(res) {
		t.Fatalf("%d entries, snapshot %v, %d of %d last results", entries, snap != nil, at, len(res))
	}
	if got := persist(t, f); !bytes.Equal(got, snap) {
		t.Fatalf("snapshot after replay differs from the one written then:\n got %x\nwant %x", got, snap)
	}
	return f, snap
}

// checkGoldenSnapshot: the snapshot a golden log ends with restores to the
// replayed state and is written again byte for byte.
func checkGoldenSnapshot(t *testing.T, f *FSM, snap []byte) {
	t.Helper()
	g := newFSM(t, 0)
	if err := restore(t, g, snap); err != nil {
		t.Fatalf("Restore of the version %d snapshot: %v", snap[8], err)
	}
	if !sameState(stateOf(t, g), stateOf(t, f)) {
		t.Fatalf("restored version %d snapshot differs from the replayed state", snap[8])
	}
	if got := persist(t, g); !bytes.Equal(got, snap) {
		t.Fatalf("restored version %d snapshot is not written again byte for byte", snap[8])
	}
}

// TestGoldenV1Log: a version 1 log replays with exactly the results it had
// when it was written, to the same state; the snapshot written then
// restores to that state and is written again byte for byte.
func TestGoldenV1Log(t *testing.T) {
	f, snap := replayGoldenLog(t, "log_v1.txt", 5)
	if snap[8] != snapshotV1 {
		t.Fatalf("golden snapshot version %d", snap[8])
	}
	checkGoldenSnapshot(t, f, snap)
	f.Read(func(tb *Table) {
		tb.Range(func(k string, h Holder) bool {
			if h.Extensions != 0 {
				t.Errorf("%q restored with %d extensions", k, h.Extensions)
			}
			return true
		})
	})
}

// TestGoldenV2Log: a log of version 1 and version 2 entries (extends,
// expiries for extension counts), written before the feature switch
// existed, replays with exactly its results, re-encodes entry for entry,
// and its version 2 snapshot restores and is written again byte for byte.
func TestGoldenV2Log(t *testing.T) {
	f, snap := replayGoldenLog(t, "log_v2.txt", 6)
	if snap[8] != snapshotV2 {
		t.Fatalf("golden snapshot version %d", snap[8])
	}
	checkGoldenSnapshot(t, f, snap)
	extended := 0
	f.Read(func(tb *Table) {
		tb.Range(func(_ string, h Holder) bool {
			if h.Extensions != 0 {
				extended++
			}
			return true
		})
	})
	if extended == 0 {
		t.Fatal("no extended holder in the golden version 2 state")
	}
}

// TestGoldenFeaturesLog: a log with Enables replays with exactly its
// results, re-encodes entry for entry, and its version 3 snapshot restores
// with the features on and is written again byte for byte.
func TestGoldenFeaturesLog(t *testing.T) {
	f, snap := replayGoldenLog(t, "log_features.txt", 7)
	if snap[8] != snapshotV3 {
		t.Fatalf("golden snapshot version %d", snap[8])
	}
	checkGoldenSnapshot(t, f, snap)
	if f.Features() != FeatureLeases {
		t.Fatalf("features %v after the golden log", f.Features())
	}
	g := newFSM(t, 0)
	if err := restore(t, g, snap); err != nil || g.Features() != FeatureLeases {
		t.Fatalf("restored features %v, %v", g.Features(), err)
	}
}
